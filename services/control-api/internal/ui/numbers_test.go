package ui_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// The overview's numbers (throughput chart, topic table) and the jobs
// browser's search and bulk actions, over the real services and database.

// rollupNow writes a job_throughput row for the database's current minute
// less ago, as a gateway's report or the reaper's sweep does.
func (tb *testBundle) rollupNow(t *testing.T, ago time.Duration, topic, writer string, completed, failed, dead int64) {
	t.Helper()
	_, err := tb.Pool.Exec(t.Context(), `INSERT INTO job_throughput (bucket, topic, writer, completed, failed, dead_lettered)
		VALUES (date_trunc('minute', now()) - $1::interval, $2, $3, $4, $5, $6)`,
		fmt.Sprintf("%d seconds", int(ago.Seconds())), topic, writer, completed, failed, dead)
	require.NoError(t, err)
}

func attr(t *testing.T, body, id, name string) string {
	t.Helper()
	m := regexp.MustCompile(`<[^>]*id="` + regexp.QuoteMeta(id) + `"[^>]*>`).FindString(body)
	require.NotEmpty(t, m, "no element #%s", id)
	v := regexp.MustCompile(name + `="([^"]*)"`).FindStringSubmatch(m)
	require.NotNil(t, v, "#%s has no %s", id, name)
	return v[1]
}

func TestDashboardNumbers(t *testing.T) {
	t.Parallel()

	t.Run("ChartsCompletedAndFailedPerMinuteAccessibly", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		tb.rollupNow(t, 0, "mail", "gw-a", 5, 2, 1)
		tb.rollupNow(t, 0, "mail", "gw-b", 3, 0, 0)
		tb.rollupNow(t, 20*time.Minute, "pdf", "reaper", 0, 4, 4)
		tb.rollupNow(t, 3*time.Hour, "pdf", "gw-a", 100, 0, 0) // outside the hour, inside 6h
		op := tb.browser(t, operatorAuth)

		code, body := op.get("/ui/")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `<figure class="chart" data-range="1h" data-completed="8" data-failed="6" data-dead="5">`)
		require.Contains(t, body, `role="img" aria-labelledby="throughput-title throughput-desc"`)
		require.Contains(t, body, `<title id="throughput-title">Attempts completed and failed per minute, last hour</title>`)
		require.Contains(t, body, "Over the last hour: 8 completed, 6 failed (5 of them dead-lettered).")
		require.Contains(t, body, ">attempts per minute</text>", "the y axis is labelled")
		require.Contains(t, body, ">time (UTC)</text>", "the x axis is labelled")
		require.Contains(t, body, `class="legend"`)
		points := attr(t, body, "line-completed", "points")
		require.Len(t, strings.Fields(points), 60, "one point per minute, zero-filled")
		require.Len(t, strings.Fields(attr(t, body, "line-failed", "points")), 60)
		require.Contains(t, body, `data-live-url="/ui/live?range=1h"`)

		_, body = op.get("/ui/?range=6h")
		require.Contains(t, body, `data-range="6h" data-completed="108"`)
		require.Len(t, strings.Fields(attr(t, body, "line-completed", "points")), 72, "6h in 5-minute buckets")
		require.Contains(t, body, `data-live-url="/ui/live?range=6h"`)
		require.Contains(t, body, `aria-current="true">6h</a>`)

		_, body = op.get("/ui/?range=7d")
		require.Contains(t, body, `id="throughput-error"`)
		require.Contains(t, body, "range: &#34;7d&#34; is not a chart range")

		// The live refresh carries the chart and the table in the page's
		// range; other pages' refresh does not read them.
		_, body = op.get("/ui/live?range=6h")
		require.Contains(t, body, `id="throughput"`)
		require.Contains(t, body, `data-range="6h"`)
		require.Contains(t, body, `id="topics"`)
		_, body = op.get("/ui/live")
		require.NotContains(t, body, `id="throughput"`)
		require.NotContains(t, body, `id="topics"`)
	})

	t.Run("TabulatesEveryTopicsNumbers", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		for range 3 {
			tb.insert(t, pulsetype.NewJob{Topic: "mail"})
		}
		tb.deadLetter(t, "pdf", "boom") // its report counts 1 failed, 1 dead lettered (ADR-0018)
		tb.rollupNow(t, 0, "pdf", "gw-a", 7, 0, 0)
		_, err := tb.dispatch.PauseDispatch(t.Context(), &pulsev1.PauseDispatchRequest{Reason: "pdf renderer upgrade", Topic: "pdf"})
		require.NoError(t, err)
		op := tb.browser(t, operatorAuth)
		_, body := op.get("/ui/")
		require.Contains(t, body, `id="topic-table"`)
		mail := row(t, body, "mail")
		require.Contains(t, mail, `data-pending>3<`)
		require.Contains(t, mail, `data-running>0<`)
		require.Contains(t, mail, `pill-running">running`)
		require.Regexp(t, `data-oldest>(&lt;1s|\d+s)<`, mail, "the oldest due job's wait")
		pdf := row(t, body, "pdf")
		require.Contains(t, pdf, `<a href="/ui/dead-letters?topic=pdf">1</a>`)
		require.Contains(t, pdf, `data-completed>7<`)
		require.Contains(t, pdf, `data-failed>1<`)
		require.Contains(t, pdf, `pill-drain">paused`)
		require.Contains(t, pdf, `name="max_running"`, "an operator gets the limit form")

		_, body = tb.browser(t, producerAuth).get("/ui/")
		require.Contains(t, body, `id="topic-table"`)
		require.NotContains(t, body, `name="max_running"`, "a producer sees the limit, not the form")
	})

	t.Run("ShowsATopicsRateLimit", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		tb.insert(t, pulsetype.NewJob{Topic: "mail"})
		_, err := tb.Store.SetTopicRateLimit(t.Context(), "api", &pulsetype.RateLimit{Limit: 10, Interval: time.Second, Key: "args:tenant"}, "alice")
		require.NoError(t, err)
		_, body := tb.browser(t, producerAuth).get("/ui/")
		require.Contains(t, row(t, body, "api"), `data-rate>10 / 1s per args.tenant<`)
		require.Contains(t, row(t, body, "mail"), `data-rate>none<`)
	})

	t.Run("ShowsATopicsPerKeyLimits", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		tb.insert(t, pulsetype.NewJob{Topic: "mail"})
		two := 2
		_, err := tb.Store.SetTopicKeyLimits(t.Context(), "reports", jobstore.KeyLimits{MaxRunningPerKey: &two, SequenceOnFailure: "block"}, "alice")
		require.NoError(t, err)
		_, body := tb.browser(t, producerAuth).get("/ui/")
		require.Contains(t, row(t, body, "reports"), `data-per-key>2 running per key; sequences, block on failure<`)
		require.NotContains(t, row(t, body, "mail"), `data-per-key`)
	})

	t.Run("SetsAndClearsALimitAndNamesABadValue", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		tb.insert(t, pulsetype.NewJob{Topic: "mail"})
		op := tb.browser(t, operatorAuth)
		for _, tc := range []struct {
			form  url.Values
			flash string
			msg   string
		}{
			{url.Values{"topic": {"mail"}, "op": {"set"}, "max_running": {"ten"}}, "flash-error", "max_running: &#34;ten&#34; is not a whole number"},
			{url.Values{"topic": {"mail"}, "op": {"set"}, "max_running": {""}}, "flash-error", "max_running: is required"},
			{url.Values{"topic": {"mail"}, "op": {"set"}, "max_running": {"-1"}}, "flash-error", "max_running: is -1; it must be between 0 and 1000000"},
			{url.Values{"topic": {"mail"}, "op": {"set"}, "max_running": {"4"}}, "flash-ok", "Topic mail: at most 4 running"},
			{url.Values{"topic": {"mail"}, "op": {"clear"}}, "flash-ok", "Topic mail: no limit"},
		} {
			code, loc, _ := op.post("/ui/topics/limit", tc.form)
			require.Equal(t, http.StatusSeeOther, code, tc.form)
			require.Equal(t, "/ui/", loc)
			_, body := op.get("/ui/")
			require.Contains(t, body, tc.flash, tc.form)
			require.Contains(t, body, tc.msg, tc.form)
		}
		code, _, _ := tb.browser(t, producerAuth).post("/ui/topics/limit", url.Values{"topic": {"mail"}, "max_running": {"1"}})
		require.Equal(t, http.StatusForbidden, code)
	})

	t.Run("SearchesByArgsAndNamesABadFilter", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		acme := tb.insert(t, pulsetype.NewJob{Topic: "mail", Args: []byte(`{"customer": "acme", "n": 1}`)})
		tb.insert(t, pulsetype.NewJob{Topic: "mail", Args: []byte(`{"customer": "globex"}`)})
		op := tb.browser(t, operatorAuth)

		code, body := op.get("/ui/jobs?args=" + url.QueryEscape(`{"customer":"acme"}`))
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, 1, strings.Count(body, `data-job="`))
		id := acme.String()
		require.Contains(t, body, `title="`+id+`"`, "the full id on hover")
		require.Contains(t, body, `<code>…`+id[len(id)-8:]+`</code>`, "the short id shown")
		require.Contains(t, body, `href="/ui/jobs/`+id+`"`)

		for _, tc := range []struct{ args, msg string }{
			{`[1]`, "args: must be a JSON object"},
			{`"acme"`, "args: must be a JSON object"},
			{`{"customer":`, "args: is not valid JSON"},
			{`{"a":"\u0000"}`, "NUL"},
			{"{\"a\":\"\xff\"}", "UTF-8"},
			{`{"k":"` + strings.Repeat("x", 70<<10) + `"}`, "the limit is 65536 bytes"},
		} {
			code, body := op.get("/ui/jobs?args=" + url.QueryEscape(tc.args))
			require.Equal(t, http.StatusBadRequest, code, "%.40q", tc.args)
			require.Contains(t, body, `data-field="args"`, "%.40q", tc.args)
			require.Contains(t, body, tc.msg, "%.40q", tc.args)
			require.NotContains(t, body, `id="bulk-actions"`, "no bulk action on a refused filter")
		}
	})

	t.Run("CancelsEveryMatchingJobAfterConfirmingTheCount", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		for i := range 5 {
			tb.insert(t, pulsetype.NewJob{Topic: "mail", Args: []byte(fmt.Sprintf(`{"customer": "acme", "n": %d}`, i))})
		}
		other := tb.insert(t, pulsetype.NewJob{Topic: "mail", Args: []byte(`{"customer": "globex"}`)})
		op := tb.browser(t, operatorAuth)
		filter := url.Values{"topic": {"mail"}, "args": {`{"customer":"acme"}`}}.Encode()

		_, body := op.get("/ui/jobs?" + filter)
		require.Contains(t, body, `id="bulk-cancel"`)
		require.Contains(t, body, `id="bulk-delete"`)
		code, body := op.get("/ui/bulk/cancel?" + filter)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `data-count="5"`)
		require.Contains(t, body, "Cancel 5 job(s)")
		require.Equal(t, 6, tb.countStatus(t, "PENDING"), "the confirmation changes nothing")

		code, loc, _ := op.post("/ui/bulk/cancel", url.Values{
			"topic": {"mail"}, "args": {`{"customer":"acme"}`}, "confirmed": {"5"},
		})
		require.Equal(t, http.StatusSeeOther, code)
		require.Equal(t, "/ui/jobs?"+filter, loc)
		_, body = op.get(loc)
		require.Contains(t, body, "Canceled 5 job(s)")
		require.Equal(t, 5, tb.countStatus(t, "CANCELED"))
		require.Equal(t, "PENDING", tb.status(t, other))

		// The count moved between confirming and acting: the flash says so.
		tb.insert(t, pulsetype.NewJob{Topic: "mail", Args: []byte(`{"customer": "acme"}`)})
		_, _, _ = op.post("/ui/bulk/cancel", url.Values{"topic": {"mail"}, "args": {`{"customer":"acme"}`}, "confirmed": {"3"}})
		_, body = op.get("/ui/jobs")
		require.Contains(t, body, "Canceled 1 job(s) (3 matched when you confirmed; jobs changed since)")

		// Nothing matches any more: nothing to confirm.
		_, body = op.get("/ui/bulk/cancel?" + filter)
		require.Contains(t, body, `data-count="0"`)
		require.NotContains(t, body, `id="bulk-form"`)
	})

	t.Run("DeletesOnlyFinishedJobsAndNamesWhatItRefuses", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		dead := tb.deadLetter(t, "pdf", "boom")
		pending := tb.insert(t, pulsetype.NewJob{Topic: "pdf"})
		op := tb.browser(t, operatorAuth)

		_, body := op.get("/ui/jobs?topic=pdf&status=PENDING")
		require.Contains(t, body, `id="bulk-cancel"`)
		require.NotContains(t, body, `id="bulk-delete"`, "a live status offers no delete")
		code, body := op.get("/ui/bulk/delete?topic=pdf&status=PENDING")
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, body, `data-field="status"`)
		require.Contains(t, body, "delete acts only on finished jobs")
		code, body = op.get("/ui/bulk/cancel")
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, body, `data-field="filter"`)

		code, _, _ = op.post("/ui/bulk/delete", url.Values{"topic": {"pdf"}, "status": {"PENDING"}})
		require.Equal(t, http.StatusSeeOther, code)
		_, body = op.get("/ui/jobs")
		require.Contains(t, body, "Delete: status: is PENDING; delete acts only on finished jobs")

		_, body = op.get("/ui/bulk/delete?topic=pdf")
		require.Contains(t, body, `data-count="1"`)
		code, _, _ = op.post("/ui/bulk/delete", url.Values{"topic": {"pdf"}, "confirmed": {"1"}})
		require.Equal(t, http.StatusSeeOther, code)
		require.Equal(t, 1, tb.countStatus(t, "PENDING"))
		var n int
		require.NoError(t, tb.Pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE id = $1`, dead).Scan(&n))
		require.Zero(t, n)
		require.Equal(t, "PENDING", tb.status(t, pending))

		code, _, _ = op.post("/ui/bulk/archive", url.Values{"topic": {"pdf"}})
		require.Equal(t, http.StatusNotFound, code)
	})

	t.Run("KeepsBulkActionsFromProducersAndOtherSites", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		tb.insert(t, pulsetype.NewJob{Topic: "mail"})
		prod := tb.browser(t, producerAuth)
		_, body := prod.get("/ui/jobs?topic=mail")
		require.NotContains(t, body, `id="bulk-actions"`)
		code, _ := prod.get("/ui/bulk/cancel?topic=mail")
		require.Equal(t, http.StatusForbidden, code)
		code, _, _ = prod.post("/ui/bulk/cancel", url.Values{"topic": {"mail"}})
		require.Equal(t, http.StatusForbidden, code)

		op := tb.browser(t, operatorAuth)
		code, _, _ = op.do(http.MethodPost, "/ui/bulk/cancel", url.Values{"topic": {"mail"}},
			http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}})
		require.Equal(t, http.StatusForbidden, code)
		code, _, _ = op.do(http.MethodPost, "/ui/topics/limit", url.Values{"topic": {"mail"}, "max_running": {"1"}},
			http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}})
		require.Equal(t, http.StatusForbidden, code)
		require.Equal(t, 1, tb.countStatus(t, "PENDING"))
	})
}

// row is the topic table's row for topic.
func row(t *testing.T, body, topic string) string {
	t.Helper()
	start := strings.Index(body, `<tr data-topic-row="`+topic+`">`)
	require.GreaterOrEqual(t, start, 0, "no row for %s", topic)
	end := strings.Index(body[start:], "</tr>")
	return body[start : start+end]
}

func (tb *testBundle) countStatus(t *testing.T, status string) int {
	t.Helper()
	var n int
	require.NoError(t, tb.Pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE status = $1`, status).Scan(&n))
	return n
}
