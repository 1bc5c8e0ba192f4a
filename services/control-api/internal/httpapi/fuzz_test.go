package httpapi_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
)

// The fuzz targets send arbitrary bodies and query strings to the JSON
// API's routes, in-process, against a real database, and hold every answer
// to three rules: never a 5xx; a refused request writes nothing; a refused
// submit never fails the good submits beside it.

// requireNo5xx fails on a server error and reports whether r refused the
// request.
func requireNo5xx(t *testing.T, r response) (refused bool) {
	t.Helper()
	require.Less(t, r.status, 500, "%s", r.body)
	return r.status >= 400
}

// bodySeeds are the poisoned bodies of the tests plus valid ones.
func bodySeeds(f *testing.F) {
	f.Add([]byte(`{"topic":"email.send","args":{"to":"a@example.com"},"priority":3,"max_attempts":5}`))
	f.Add([]byte(`{"topic":"files","args":{"path":"C:\\u0000dir"},"idempotency_key":"k-1","run_at":"2031-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"topic":"email.send","args":null}`))
	f.Add([]byte(`{"topic":"t","args":[1]}`))
	f.Add([]byte(`{"topic":"t","priority":1e1000000}`))
	f.Add([]byte(`{"topic":"t","unknown":1}`))
	f.Add([]byte(`{"topic":"t"} trailing`))
	f.Add([]byte(``))
	for _, p := range poisonedBodies {
		f.Add([]byte(p.body))
	}
}

func FuzzHTTPSubmit(f *testing.F) {
	bodySeeds(f)
	b := setupAll(f, apitest.Options{})
	f.Fuzz(func(t *testing.T, body []byte) {
		before := b.CountJobs(t)
		const companions = 3
		good := make([]response, companions)
		var wg sync.WaitGroup
		for i := range companions {
			wg.Go(func() {
				good[i] = b.serve(http.MethodPost, "/v1/jobs", "", []byte(`{"topic":"companion","args":{"ok":true}}`))
			})
		}
		r := b.serve(http.MethodPost, "/v1/jobs", "", body)
		wg.Wait()
		for _, g := range good {
			require.Equal(t, http.StatusCreated, g.status, "a good submit failed beside %q: %s", body, g.body)
		}
		written := b.CountJobs(t) - before
		if requireNo5xx(t, r) {
			require.Equal(t, companions, written, "a refused submit wrote a row: %s", r.body)
			return
		}
		require.Contains(t, []int{companions, companions + 1}, written) // +0: a duplicate key
	})
}

func FuzzHTTPSubmitBatch(f *testing.F) {
	f.Add([]byte(`{"jobs":[{"topic":"a"},{"topic":"b","args":{"x":1}}]}`))
	f.Add([]byte(`{"jobs":[]}`))
	f.Add([]byte(`{"jobs":[{"topic":"a"},{"topic":"b","args":{"x":"\u0000"}}]}`))
	f.Add([]byte("{\"jobs\":[{\"topic\":\"a\",\"idempotency_key\":\"\xff\"}]}"))
	f.Add([]byte(`{"jobs":[{"topic":"a","run_at":"9999-12-31T23:59:59Z"}]}`))
	f.Add([]byte(`{"jobs":[{"topic":"a","args":{"n":-1e1000000}},{"topic":"b"}]}`))
	f.Add([]byte(`{"jobs":{"topic":"a"}}`))
	for _, p := range poisonedBodies {
		f.Add([]byte(`{"jobs":[{"topic":"ok"},` + p.body + `]}`))
	}
	b := setupAll(f, apitest.Options{})
	f.Fuzz(func(t *testing.T, body []byte) {
		before := b.CountJobs(t)
		r := b.serve(http.MethodPost, "/v1/jobs:batch", "", body)
		if requireNo5xx(t, r) {
			require.Equal(t, before, b.CountJobs(t), "a refused batch wrote rows: %s", r.body)
		}
	})
}

func FuzzHTTPListJobs(f *testing.F) {
	f.Add("topic=email.send&status=pending&limit=2")
	f.Add("topic=a%00")
	f.Add("topic=%ff&status=%00")
	f.Add("page_token=AAAAAAAAAAAAAAAAAAAAAB")
	f.Add("page_token=%ff%00&limit=0")
	f.Add("limit=99999999999&bogus=1")
	f.Add("%zz=1&;&topic")
	b := setupAll(f, apitest.Options{})
	r := b.serve(http.MethodPost, "/v1/jobs", "", []byte(`{"topic":"email.send"}`))
	require.Equal(f, http.StatusCreated, r.status)
	f.Fuzz(func(t *testing.T, query string) {
		before := b.CountRows(t)
		requireNo5xx(t, b.serve(http.MethodGet, "/v1/jobs", query, nil))
		requireNo5xx(t, b.serve(http.MethodGet, "/v1/dispatch/events", query, nil))
		require.Equal(t, before, b.CountRows(t))
	})
}

func FuzzHTTPPauseResume(f *testing.F) {
	for _, body := range []string{
		`{"reason":"deploy"}`, `{"reason":"smtp down","topic":"mail","mode":"quiesce","for":"1h"}`,
		`{"reason":"r","until":"2031-01-01T00:00:00Z"}`, `{"reason":"deploy\u0000"}`, "{\"reason\":\"deploy\xc3\"}",
		`{"reason":"deploy\udc00"}`, `{"reason":"r","topic":"mail\u0000"}`, `{"reason":"r","until":"9500-01-01T00:00:00Z"}`,
		`{"reason":"r","for":"1h\u0000"}`, `{"reason":"r","for":"2562047h"}`, `{"reason":"r","for":"1h","until":"2031-01-01T00:00:00Z"}`,
		`{"topic":"mail"}`, "{\"topic\":\"\xff\"}", ``,
	} {
		f.Add([]byte(body), false)
		f.Add([]byte(body), true)
	}
	b := setupAll(f, apitest.Options{})
	f.Fuzz(func(t *testing.T, body []byte, resume bool) {
		before := b.CountRows(t)
		path := "/v1/dispatch/pause"
		if resume {
			path = "/v1/dispatch/resume"
		}
		if requireNo5xx(t, b.serve(http.MethodPost, path, "", body)) {
			require.Equal(t, before, b.CountRows(t), "a refused %s wrote", path)
		}
		requireNo5xx(t, b.serve(http.MethodGet, "/v1/dispatch", "", nil))
	})
}

func FuzzHTTPSchedules(f *testing.F) {
	for _, s := range []struct{ body, query string }{
		{`{"name":"nightly","topic":"reports","kind":"cron","expression":"0 3 * * *","time_zone":"Europe/Paris","args":{"full":true}}`, "limit=2"},
		{`{"name":"ev","topic":"reports","kind":"every","expression":"90s","enabled":false}`, "page_token=bmlnaHRseQ"},
		{`{"name":"once","topic":"reports","kind":"at","expression":"2031-01-01T00:00:00Z"}`, "page_token=AA"},
		{`{"name":"never","topic":"t","kind":"cron","expression":"0 0 30 2 *"}`, "page_token=_w"},
		{`{"name":"far","topic":"t","kind":"at","expression":"9500-01-01T00:00:00Z"}`, "page_token=%00"},
		{`{"name":"a\u0000","topic":"t","kind":"every","expression":"1h"}`, "limit=0"},
		{"{\"name\":\"a\",\"topic\":\"t\",\"kind\":\"every\",\"expression\":\"1h\xff\"}", "page_token=f_______________AAAAAAAAAAAAAAAA"},
		{`{"name":"a","topic":"t","kind":"every","expression":"1h","time_zone":"UTC\u0000"}`, ""},
		{`{"name":"a","topic":"t","kind":"every","expression":"1h","args":{"n":1e1000000}}`, ""},
		{`{"name":"a","topic":"t","kind":"cron","expression":"@every 1h"}`, "bogus=1"},
	} {
		f.Add([]byte(s.body), s.query)
	}
	b := setupAll(f, apitest.Options{})
	r := b.serve(http.MethodPost, "/v1/schedules", "", []byte(`{"name":"existing","topic":"reports","kind":"every","expression":"1h"}`))
	require.Equal(f, http.StatusCreated, r.status, string(r.body))
	var existing scheduleOut
	require.NoError(f, json.Unmarshal(r.body, &existing))
	f.Fuzz(func(t *testing.T, body []byte, query string) {
		before := b.CountRows(t)
		if requireNo5xx(t, b.serve(http.MethodPost, "/v1/schedules", "", body)) {
			require.Equal(t, before, b.CountRows(t), "a refused create wrote")
		}
		was := b.serve(http.MethodGet, "/v1/schedules/"+existing.ID, "", nil)
		require.Equal(t, http.StatusOK, was.status)
		if requireNo5xx(t, b.serve(http.MethodPut, "/v1/schedules/"+existing.ID, "", body)) {
			now := b.serve(http.MethodGet, "/v1/schedules/"+existing.ID, "", nil)
			require.JSONEq(t, string(was.body), string(now.body), "a refused update changed the schedule")
		}
		requireNo5xx(t, b.serve(http.MethodGet, "/v1/schedules", query, nil))
		requireNo5xx(t, b.serve(http.MethodGet, "/v1/schedules/"+existing.ID+"/jobs", query, nil))
	})
}
