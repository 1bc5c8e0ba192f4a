package httpapi_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit/submittest"
)

// fullBundle serves every JSON route (jobs, dispatch, schedules) on a
// fresh database, as an operator: over loopback HTTP (url) and in-process
// (handler), which the fuzz targets use to stay fast.
type fullBundle struct {
	*apitest.Bundle
	handler http.Handler
	url     string
}

func setupAll(t testing.TB, opts apitest.Options) *fullBundle {
	t.Helper()
	if opts.MaxArgsBytes == 0 {
		opts.MaxArgsBytes = maxArgsBytes
	}
	if opts.MaxBatchJobs == 0 {
		opts.MaxBatchJobs = 10
	}
	b := apitest.New(t, opts)
	mux := http.NewServeMux()
	h := httpapi.New(b.Service, httpapi.Options{MaxArgsBytes: opts.MaxArgsBytes})
	h.Register(mux)
	h.RegisterDispatch(mux, api.NewDispatchControl(b.Store, api.DispatchOptions{}))
	h.RegisterSchedules(mux, api.NewSchedules(b.Store, nil, nil))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(auth.WithIdentity(r.Context(), auth.Identity{Name: "op-1", Role: auth.RoleOperator}))
		mux.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &fullBundle{Bundle: b, handler: handler, url: srv.URL}
}

// post sends body over loopback HTTP; it is safe from many goroutines.
func (b *fullBundle) post(path string, body []byte) (response, error) {
	resp, err := http.Post(b.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	return response{status: resp.StatusCode, body: buf.Bytes()}, err
}

// serve runs one request in-process; rawQuery is sent as it is.
func (b *fullBundle) serve(method, path, rawQuery string, body []byte) response {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.URL.RawQuery = rawQuery
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	return response{status: rec.Code, body: rec.Body.Bytes()}
}

// poisonedBodies are POST /v1/jobs bodies with one value Postgres cannot
// store, as raw bytes, each with the field its 400 must name.
var poisonedBodies = []struct{ name, body, field string }{
	{"InvalidUTF8InArgs", "{\"topic\":\"email.send\",\"args\":{\"to\":\"\xff\"}}", "args"},
	{"InvalidUTF8KeyInArgs", "{\"topic\":\"email.send\",\"args\":{\"\xc3\":1}}", "args"},
	{"NULKeyInArgs", `{"topic":"email.send","args":{"\u0000":1}}`, "args"},
	{"NULValueInArgs", `{"topic":"email.send","args":{"to":"a\u0000b"}}`, "args"},
	{"NumberJsonbCannotHold", `{"topic":"email.send","args":{"n":1e1000000}}`, "args"},
	{"LoneSurrogateInArgs", `{"topic":"email.send","args":{"to":"\ud800"}}`, "args"},
	{"HugeTimestamp", `{"topic":"email.send","run_at":"9500-01-01T00:00:00Z"}`, "run_at"},
	{"TimestampBefore1970", `{"topic":"email.send","run_at":"0001-01-01T00:00:00Z"}`, "run_at"},
	{"NULInIdempotencyKey", `{"topic":"email.send","idempotency_key":"order\u000042"}`, "idempotency_key"},
	{"InvalidUTF8InIdempotencyKey", "{\"topic\":\"email.send\",\"idempotency_key\":\"order\xc3\"}", "idempotency_key"},
	{"LoneSurrogateInIdempotencyKey", `{"topic":"email.send","idempotency_key":"order\udc00"}`, "idempotency_key"},
	{"InvalidUTF8InTopic", "{\"topic\":\"email\xff\"}", "topic"},
	{"NULInTopic", `{"topic":"email\u0000"}`, "topic"},
}

// lineUpHTTP submits one job and waits until the coalescer's only flusher
// holds it at the shut gate.
func lineUpHTTP(t *testing.T, b *fullBundle) <-chan response {
	t.Helper()
	first := make(chan response, 1)
	go func() {
		r, _ := b.post("/v1/jobs", []byte(`{"topic":"first"}`))
		first <- r
	}()
	submittest.Wait(t, b.Coalescer, "the first submit taken by the flusher", func(s submit.Stats) bool { return s.Submits == 1 && s.Queued == 0 })
	return first
}

// TestOnePoisonedSubmitNeverHarmsItsBatchOverHTTP: 50 concurrent POST
// /v1/jobs, one carrying a value Postgres cannot store. It gets a 400
// naming its field; the other 49 share one INSERT and all get 201.
func TestOnePoisonedSubmitNeverHarmsItsBatchOverHTTP(t *testing.T) {
	t.Parallel()
	for _, p := range poisonedBodies {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			gate := submittest.NewGate()
			b := setupAll(t, apitest.Options{Flushers: 1, Inserter: gate.Wrap})
			first := lineUpHTTP(t, b)

			const n, culprit = 50, 29
			got := make([]response, n)
			submittest.Burst(t, b.Coalescer, gate, n, n-1, func(i int) {
				body := []byte(`{"topic":"email.send","args":{"to":"a@example.com"}}`)
				if i == culprit {
					body = []byte(p.body)
				}
				r, err := b.post("/v1/jobs", body)
				if err != nil {
					r = response{status: -1, body: []byte(err.Error())}
				}
				got[i] = r
			})
			require.Equal(t, http.StatusCreated, (<-first).status)

			requireError(t, got[culprit], http.StatusBadRequest, "invalid_argument", p.field)
			for i := range n {
				if i != culprit {
					require.Equal(t, http.StatusCreated, got[i].status, "submit %d: %s", i, got[i].body)
				}
			}
			require.Equal(t, n, b.CountJobs(t))
			require.EqualValues(t, 2, b.Coalescer.Stats().Statements, "the first job, then the 49 in one INSERT")
		})
	}
}

// TestADataErrorPastValidationFailsOnlyItsSubmitterOverHTTP forces a data
// error validation cannot know about (a CHECK on args) into a coalesced
// batch of 50: only the poisoned submit fails, with a 400 naming args.
func TestADataErrorPastValidationFailsOnlyItsSubmitterOverHTTP(t *testing.T) {
	t.Parallel()
	gate := submittest.NewGate()
	b := setupAll(t, apitest.Options{Flushers: 1, Inserter: gate.Wrap})
	b.PoisonArgs(t)
	first := lineUpHTTP(t, b)

	const n, culprit = 50, 0
	got := make([]response, n)
	submittest.Burst(t, b.Coalescer, gate, n, n, func(i int) {
		body := `{"topic":"email.send","args":{"to":"a@example.com"}}`
		if i == culprit {
			body = `{"topic":"email.send","args":{"poison":true}}`
		}
		got[i], _ = b.post("/v1/jobs", []byte(body))
	})
	require.Equal(t, http.StatusCreated, (<-first).status)
	requireError(t, got[culprit], http.StatusBadRequest, "invalid_argument", "args")
	for i := range n {
		if i != culprit {
			require.Equal(t, http.StatusCreated, got[i].status, "submit %d: %s", i, got[i].body)
		}
	}
	require.Equal(t, n, b.CountJobs(t))
	require.EqualValues(t, 2, b.Coalescer.Stats().Statements)

	r := b.serve(http.MethodPost, "/v1/jobs:batch", "", []byte(`{"jobs":[{"topic":"a"},{"topic":"b","args":{"poison":1}}]}`))
	requireError(t, r, http.StatusBadRequest, "invalid_argument", "jobs[1].args")
	require.Equal(t, n, b.CountJobs(t))
}

// TestUnstorableRequestsAre400sNamingTheField covers batch bodies, query
// strings, pause and schedule bodies; nothing refused is written.
func TestUnstorableRequestsAre400sNamingTheField(t *testing.T) {
	t.Parallel()
	b := setupAll(t, apitest.Options{})
	r := b.serve(http.MethodPost, "/v1/schedules", "", []byte(`{"name":"nightly","topic":"reports","kind":"cron","expression":"0 3 * * *"}`))
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var sc scheduleOut
	r.decode(t, &sc)
	before := b.CountRows(t)

	for _, tc := range []struct {
		name, method, path, query, body, field string
	}{
		{"BatchMember", "POST", "/v1/jobs:batch", "", `{"jobs":[{"topic":"a"},{"topic":"b","args":{"x":"\u0000"}}]}`, "jobs[1].args"},
		{"BatchMemberKey", "POST", "/v1/jobs:batch", "", "{\"jobs\":[{\"topic\":\"a\",\"idempotency_key\":\"\xff\"}]}", "jobs[0].idempotency_key"},
		{"BatchMemberRunAt", "POST", "/v1/jobs:batch", "", `{"jobs":[{"topic":"a"},{"topic":"a"},{"topic":"a","run_at":"9999-12-31T23:59:59Z"}]}`, "jobs[2].run_at"},
		{"ListTopicNUL", "GET", "/v1/jobs", "topic=a%00", "", "topic"},
		{"ListTopicInvalidUTF8", "GET", "/v1/jobs", "topic=%ff", "", "topic"},
		{"ListStatusNUL", "GET", "/v1/jobs", "status=%00", "", "status"},
		{"ListPageTokenJunk", "GET", "/v1/jobs", "page_token=%ff%00", "", "page_token"},
		{"ListPageTokenNotCanonical", "GET", "/v1/jobs", "page_token=AAAAAAAAAAAAAAAAAAAAAB", "", "page_token"},
		{"PauseReasonNUL", "POST", "/v1/dispatch/pause", "", `{"reason":"deploy\u0000"}`, "reason"},
		{"PauseReasonInvalidUTF8", "POST", "/v1/dispatch/pause", "", "{\"reason\":\"deploy\xc3\"}", "reason"},
		{"PauseReasonLoneSurrogate", "POST", "/v1/dispatch/pause", "", `{"reason":"deploy\udc00"}`, "reason"},
		{"PauseTopicNUL", "POST", "/v1/dispatch/pause", "", `{"reason":"r","topic":"mail\u0000"}`, "topic"},
		{"PauseUntilFarAway", "POST", "/v1/dispatch/pause", "", `{"reason":"r","until":"9500-01-01T00:00:00Z"}`, "until"},
		{"PauseForNUL", "POST", "/v1/dispatch/pause", "", `{"reason":"r","for":"1h\u0000"}`, "for"},
		{"ResumeTopicInvalidUTF8", "POST", "/v1/dispatch/resume", "", "{\"topic\":\"\xff\"}", "topic"},
		{"EventsPageToken", "GET", "/v1/dispatch/events", "page_token=%00", "", "page_token"},
		{"ScheduleNameNUL", "POST", "/v1/schedules", "", `{"name":"a\u0000","topic":"t","kind":"every","expression":"1h"}`, "name"},
		{"ScheduleExpressionInvalidUTF8", "POST", "/v1/schedules", "", "{\"name\":\"a\",\"topic\":\"t\",\"kind\":\"every\",\"expression\":\"1h\xff\"}", "expression"},
		{"ScheduleTimeZoneNUL", "POST", "/v1/schedules", "", `{"name":"a","topic":"t","kind":"every","expression":"1h","time_zone":"UTC\u0000"}`, "time_zone"},
		{"ScheduleArgsHugeNumber", "POST", "/v1/schedules", "", `{"name":"a","topic":"t","kind":"every","expression":"1h","args":{"n":1e1000000}}`, "args"},
		{"ScheduleCronNeverFires", "POST", "/v1/schedules", "", `{"name":"a","topic":"t","kind":"cron","expression":"0 0 30 2 *"}`, "expression"},
		{"ScheduleUpdateCronNeverFires", "PUT", "/v1/schedules/" + sc.ID, "", `{"name":"nightly","topic":"t","kind":"cron","expression":"0 0 31 11 *"}`, "expression"},
		{"ScheduleUpdateArgsNUL", "PUT", "/v1/schedules/" + sc.ID, "", `{"name":"nightly","topic":"t","kind":"cron","expression":"0 3 * * *","args":{"\u0000":0}}`, "args"},
		{"SchedulesPageTokenJunk", "GET", "/v1/schedules", "page_token=_w", "", "page_token"},
		{"ScheduleJobsPageTokenJunk", "GET", "/v1/schedules/" + sc.ID + "/jobs", "page_token=%00", "", "page_token"},
	} {
		r := b.serve(tc.method, tc.path, tc.query, []byte(tc.body))
		t.Run(tc.name, func(t *testing.T) {
			requireError(t, r, http.StatusBadRequest, "invalid_argument", tc.field)
		})
	}
	require.Equal(t, before, b.CountRows(t), "nothing refused was written")

	// Valid input stays valid: an escaped backslash before u0000 is text.
	r = b.serve(http.MethodPost, "/v1/jobs", "", []byte(`{"topic":"files","args":{"path":"C:\\u0000dir"}}`))
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var s submitted
	r.decode(t, &s)
	r = b.serve(http.MethodGet, "/v1/jobs/"+s.ID, "", nil)
	require.Contains(t, string(r.body), `"path":"C:\\u0000dir"`)
}
