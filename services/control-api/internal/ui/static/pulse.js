// pulse dashboard, the only script: refreshes the live regions (the banner
// and the drain panel) in place, and wires select-all boxes. Every page
// works without it; it only saves reloading.
(function () {
  "use strict";
  var body = document.body;
  var every = Number(body.dataset.refreshMs) || 2000;
  var liveURL = body.dataset.liveUrl;

  function refresh() {
    if (document.hidden || !liveURL) return;
    fetch(liveURL, { credentials: "same-origin", cache: "no-store", headers: { Accept: "text/html" } })
      .then(function (resp) {
        if (!resp.ok) throw new Error("live refresh: HTTP " + resp.status);
        return resp.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        doc.querySelectorAll("[data-live][id]").forEach(function (fresh) {
          var old = document.getElementById(fresh.id);
          // Never swap a region out from under a control being used.
          if (old && !old.contains(document.activeElement)) {
            old.replaceWith(document.importNode(fresh, true));
          }
        });
        body.dataset.refreshedAt = String(Date.now());
      })
      .catch(function (err) {
        body.dataset.refreshError = String(err);
      });
  }
  setInterval(refresh, every);
  document.addEventListener("visibilitychange", refresh);

  document.querySelectorAll("input[data-select-all]").forEach(function (all) {
    all.addEventListener("change", function () {
      document.querySelectorAll('input[type="checkbox"][name="' + all.dataset.selectAll + '"]').forEach(function (box) {
        box.checked = all.checked;
      });
    });
  });
})();
