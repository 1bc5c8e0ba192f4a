package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCrossOriginRequestsAreRefused: a browser on another site holding an
// operator's Basic credentials cannot change anything through the JSON
// API or the dashboard; curl, the CLI and the SDK (no Origin, no
// Sec-Fetch-Site) and same-origin pages still can.
func TestCrossOriginRequestsAreRefused(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, false)

	send := func(t *testing.T, method, path, contentType, body string, header http.Header) (int, string, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, b.scheme+"://"+b.app.AdminAddr()+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", operator)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := b.http.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(raw)
	}
	foreign := map[string]http.Header{
		"SecFetchSite":  {"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}},
		"ForeignOrigin": {"Origin": {"https://evil.example"}},
	}
	paused := func(t *testing.T) bool {
		t.Helper()
		var d struct {
			Paused bool `json:"paused"`
		}
		r := b.do(t, "GET", "/v1/dispatch", "", producer)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.NoError(t, json.Unmarshal([]byte(r.body), &d))
		return d.Paused
	}
	jobStatus := func(t *testing.T, id string) string {
		t.Helper()
		var j struct {
			Status string `json:"status"`
		}
		r := b.do(t, "GET", "/v1/jobs/"+id, "", producer)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.NoError(t, json.Unmarshal([]byte(r.body), &j))
		return j.Status
	}
	scheduleCount := func(t *testing.T) int {
		t.Helper()
		var s struct {
			Schedules []json.RawMessage `json:"schedules"`
		}
		r := b.do(t, "GET", "/v1/schedules", "", producer)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.NoError(t, json.Unmarshal([]byte(r.body), &s))
		return len(s.Schedules)
	}

	id := b.submitHTTP(t)
	for name, header := range foreign {
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/v1/dispatch/pause", `{"reason":"from evil.example"}`},
			{"POST", "/v1/jobs/" + id + "/cancel", ``},
			{"POST", "/v1/jobs", `{"topic":"csrf.test"}`},
			{"POST", "/v1/schedules", `{"name":"evil","topic":"csrf.test","kind":"every","expression":"1m"}`},
		} {
			code, ctype, body := send(t, c.method, c.path, "application/json", c.body, header)
			require.Equal(t, http.StatusForbidden, code, "%s %s %s: %s", name, c.method, c.path, body)
			require.Equal(t, "application/json", ctype)
			var e struct {
				Error struct{ Code, Message string }
			}
			require.NoError(t, json.Unmarshal([]byte(body), &e), body)
			require.Equal(t, "permission_denied", e.Error.Code)
			require.Contains(t, e.Error.Message, "cross-origin")
		}
		// The dashboard's own forms: refused too, with its error page.
		code, ctype, body := send(t, "POST", "/ui/dispatch/pause", "application/x-www-form-urlencoded",
			url.Values{"reason": {"from evil.example"}, "mode": {"drain"}}.Encode(), header)
		require.Equal(t, http.StatusForbidden, code, body)
		require.Contains(t, ctype, "text/html")
	}
	require.False(t, paused(t), "no cross-origin pause took effect")
	require.Equal(t, "PENDING", jobStatus(t, id), "no cross-origin cancel took effect")
	require.Zero(t, scheduleCount(t))
	r := b.do(t, "GET", "/v1/jobs?topic=csrf.test", "", producer)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `"jobs":[]`, "no cross-origin submit took effect")

	// Non-browser clients and same-origin pages go through.
	code, _, body := send(t, "POST", "/v1/jobs/"+id+"/cancel", "application/json", "", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "CANCELED", jobStatus(t, id))
	code, _, body = send(t, "POST", "/v1/dispatch/pause", "application/json", `{"reason":"maintenance"}`,
		http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {b.scheme + "://" + b.app.AdminAddr()}})
	require.Equal(t, http.StatusOK, code, body)
	require.True(t, paused(t))
	// Reads are never refused: they change nothing.
	code, _, body = send(t, "GET", "/v1/dispatch", "application/json", "", foreign["SecFetchSite"])
	require.Equal(t, http.StatusOK, code, body)
}
