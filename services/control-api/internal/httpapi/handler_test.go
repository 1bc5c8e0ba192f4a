package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

const maxArgsBytes = 1024

type testBundle struct {
	*apitest.Bundle
	url string
}

// setup serves the real JSON API over HTTP on a fresh database.
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := apitest.New(t, apitest.Options{MaxArgsBytes: maxArgsBytes, MaxBatchJobs: 10})
	mux := http.NewServeMux()
	httpapi.New(b.Service, httpapi.Options{MaxArgsBytes: maxArgsBytes}).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testBundle{Bundle: b, url: srv.URL}
}

type response struct {
	status int
	body   []byte
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), string(r.body))
}

type apiError struct {
	Error struct {
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Field   *string `json:"field"`
	} `json:"error"`
}

func (b *testBundle) do(t *testing.T, method, path string, body string, header ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.url+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, body: data}
}

type submitted struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

type job struct {
	ID          string          `json:"id"`
	Topic       string          `json:"topic"`
	Args        json.RawMessage `json:"args"`
	Priority    int             `json:"priority"`
	Status      string          `json:"status"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	Errors      []any           `json:"errors"`
	SubmittedAt *string         `json:"submitted_at"`
	NextRunAt   *string         `json:"next_run_at"`
	FinishedAt  *string         `json:"finished_at"`
	LeaseUntil  *string         `json:"lease_until"`
	Traceparent string          `json:"traceparent"`
}

func (b *testBundle) submit(t *testing.T, body string) submitted {
	t.Helper()
	r := b.do(t, "POST", "/v1/jobs", body)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var s submitted
	r.decode(t, &s)
	return s
}

func (b *testBundle) getJob(t *testing.T, id string) job {
	t.Helper()
	r := b.do(t, "GET", "/v1/jobs/"+id, "")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var j job
	r.decode(t, &j)
	return j
}

// requireError checks the status and that the JSON error body names field.
func requireError(t *testing.T, r response, status int, code, field string) {
	t.Helper()
	require.Equal(t, status, r.status, string(r.body))
	var e apiError
	r.decode(t, &e)
	require.Equal(t, code, e.Error.Code, string(r.body))
	require.NotEmpty(t, e.Error.Message)
	if field == "" {
		require.Nil(t, e.Error.Field, "field is omitted when empty: %s", r.body)
		return
	}
	require.NotNil(t, e.Error.Field, string(r.body))
	require.Equal(t, field, *e.Error.Field, string(r.body))
}

func TestJSONAPI(t *testing.T) {
	t.Parallel()

	t.Run("SubmitGetListCancelRetryWalkAJobThroughItsLife", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ids []string
		for i := range 5 {
			s := b.submit(t, fmt.Sprintf(`{"topic":"email.send","args":{"i":%d},"priority":%d,"max_attempts":3}`, i, i))
			require.False(t, s.Duplicate)
			ids = append(ids, s.ID)
		}

		j := b.getJob(t, ids[2])
		require.Equal(t, ids[2], j.ID)
		require.Equal(t, "email.send", j.Topic)
		require.Equal(t, `{"i":2}`, string(j.Args))
		require.Equal(t, 2, j.Priority)
		require.Equal(t, "PENDING", j.Status)
		require.Equal(t, 3, j.MaxAttempts)
		require.NotNil(t, j.Errors, "errors is an empty list, not null")
		require.NotNil(t, j.SubmittedAt)
		require.NotNil(t, j.NextRunAt)
		require.Nil(t, j.FinishedAt, "unset times are null")
		require.Nil(t, j.LeaseUntil)

		var listed []string
		token := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 3, "5 jobs fit in 3 pages of 2")
			r := b.do(t, "GET", "/v1/jobs?topic=email.send&limit=2&page_token="+token, "")
			require.Equal(t, http.StatusOK, r.status, string(r.body))
			var page struct {
				Jobs          []job  `json:"jobs"`
				NextPageToken string `json:"next_page_token"`
			}
			r.decode(t, &page)
			for _, j := range page.Jobs {
				listed = append(listed, j.ID)
			}
			if token = page.NextPageToken; token == "" {
				require.Len(t, page.Jobs, 1)
				break
			}
			require.Len(t, page.Jobs, 2)
		}
		require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, listed)

		r := b.do(t, "POST", "/v1/jobs/"+ids[0]+"/cancel", "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var canceled job
		r.decode(t, &canceled)
		require.Equal(t, "CANCELED", canceled.Status)
		require.NotNil(t, canceled.FinishedAt)

		r = b.do(t, "GET", "/v1/jobs?status=canceled", "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		require.Contains(t, string(r.body), ids[0])
		require.NotContains(t, string(r.body), ids[1])

		r = b.do(t, "POST", "/v1/jobs/"+ids[0]+"/retry", "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var retried job
		r.decode(t, &retried)
		require.Equal(t, "PENDING", retried.Status)

		r = b.do(t, "POST", "/v1/jobs/"+ids[1]+"/retry", "")
		requireError(t, r, http.StatusConflict, "invalid_transition", "")
	})

	t.Run("UnknownIDsAre404", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const unknown = "01890a5d-ac96-774b-bcce-b302099a8057"
		requireError(t, b.do(t, "GET", "/v1/jobs/"+unknown, ""), http.StatusNotFound, "not_found", "")
		requireError(t, b.do(t, "POST", "/v1/jobs/"+unknown+"/cancel", ""), http.StatusNotFound, "not_found", "")
		requireError(t, b.do(t, "POST", "/v1/jobs/"+unknown+"/retry", ""), http.StatusNotFound, "not_found", "")
	})

	t.Run("BadInputIsRefusedNamingTheProblemAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.submit(t, `{"topic":"seed"}`)
		before := b.CountJobs(t)

		pad := strings.Repeat("x", maxArgsBytes)
		cases := []struct {
			name, method, path, body string
			status                   int
			field                    string
		}{
			{"TopicWithASpace", "POST", "/v1/jobs", `{"topic":"has space"}`, 400, "topic"},
			{"MissingTopic", "POST", "/v1/jobs", `{"args":{}}`, 400, "topic"},
			{"ArgsNotAJSONObject", "POST", "/v1/jobs", `{"topic":"t","args":"not json"}`, 400, "args"},
			{"ArgsAJSONArray", "POST", "/v1/jobs", `{"topic":"t","args":[1,2]}`, 400, "args"},
			{"ArgsOverTheLimit", "POST", "/v1/jobs", `{"topic":"t","args":{"pad":"` + pad + `"}}`, 400, "args"},
			{"BodyFarOverTheLimit", "POST", "/v1/jobs", `{"topic":"t","args":{"pad":"` + strings.Repeat(pad, 100) + `"}}`, 413, "args"},
			{"PriorityEleven", "POST", "/v1/jobs", `{"topic":"t","priority":11}`, 400, "priority"},
			{"PriorityAString", "POST", "/v1/jobs", `{"topic":"t","priority":"high"}`, 400, "priority"},
			{"PriorityAFraction", "POST", "/v1/jobs", `{"topic":"t","priority":1.5}`, 400, "priority"},
			{"MaxAttemptsOverOneHundred", "POST", "/v1/jobs", `{"topic":"t","max_attempts":101}`, 400, "max_attempts"},
			{"MaxAttemptsNegative", "POST", "/v1/jobs", `{"topic":"t","max_attempts":-1}`, 400, "max_attempts"},
			{"RunAtNotRFC3339", "POST", "/v1/jobs", `{"topic":"t","run_at":"tomorrow"}`, 400, "run_at"},
			{"GarbageBody", "POST", "/v1/jobs", `{"topic": nope`, 400, "body"},
			{"EmptyBody", "POST", "/v1/jobs", ``, 400, "body"},
			{"BodyAnArray", "POST", "/v1/jobs", `[{"topic":"t"}]`, 400, "body"},
			{"DataAfterTheObject", "POST", "/v1/jobs", `{"topic":"t"} {"topic":"u"}`, 400, "body"},
			{"UnknownField", "POST", "/v1/jobs", `{"topic":"t","colour":"red"}`, 400, "colour"},
			{"InvalidIDToGet", "GET", "/v1/jobs/not-a-uuid", ``, 400, "id"},
			{"InvalidIDToCancel", "POST", "/v1/jobs/not-a-uuid/cancel", ``, 400, "id"},
			{"InvalidIDToRetry", "POST", "/v1/jobs/not-a-uuid/retry", ``, 400, "id"},
			{"ListLimitTooLarge", "GET", "/v1/jobs?limit=501", ``, 400, "limit"},
			{"ListLimitNotANumber", "GET", "/v1/jobs?limit=ten", ``, 400, "limit"},
			{"ListUnknownStatus", "GET", "/v1/jobs?status=SLEEPING", ``, 400, "status"},
			{"ListBadPageToken", "GET", "/v1/jobs?page_token=%21%21", ``, 400, "page_token"},
			{"ListBadTopic", "GET", "/v1/jobs?topic=has%20space", ``, 400, "topic"},
			{"ListUnknownParameter", "GET", "/v1/jobs?colour=red", ``, 400, "colour"},
			{"BatchWithOneBadTopic", "POST", "/v1/jobs:batch", `{"jobs":[{"topic":"ok"},{"topic":"bad topic"},{"topic":"ok2"}]}`, 400, "jobs[1].topic"},
			{"BatchWithAWrongType", "POST", "/v1/jobs:batch", `{"jobs":[{"topic":"ok"},{"topic":"ok","priority":"high"}]}`, 400, "jobs[1].priority"},
			{"BatchWithAnUnknownField", "POST", "/v1/jobs:batch", `{"jobs":[{"topic":"ok","colour":"red"}]}`, 400, "jobs[0].colour"},
			{"BatchWithANonObjectEntry", "POST", "/v1/jobs:batch", `{"jobs":[{"topic":"ok"},7]}`, 400, "jobs[1]"},
			{"BatchBadRunAt", "POST", "/v1/jobs:batch", `{"jobs":[{"topic":"ok","run_at":"soon"}]}`, 400, "jobs[0].run_at"},
			{"BatchEmpty", "POST", "/v1/jobs:batch", `{"jobs":[]}`, 400, "jobs"},
			{"BatchOverTheJobLimit", "POST", "/v1/jobs:batch", `{"jobs":[` + strings.Repeat(`{"topic":"t"},`, 10) + `{"topic":"t"}]}`, 400, "jobs"},
			{"BatchGarbage", "POST", "/v1/jobs:batch", `{"jobs":[`, 400, "body"},
		}
		for _, tc := range cases {
			r := b.do(t, tc.method, tc.path, tc.body)
			requireError(t, r, tc.status, "invalid_argument", tc.field)
			require.Equal(t, before, b.CountJobs(t), "%s wrote nothing", tc.name)
		}
	})

	t.Run("AnIdempotentResubmitReturnsTheSameJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		body := `{"topic":"email.send","idempotency_key":"order-42"}`
		first := b.submit(t, body)
		require.False(t, first.Duplicate)
		r := b.do(t, "POST", "/v1/jobs", body)
		require.Equal(t, http.StatusOK, r.status, "a duplicate is 200, not 201: %s", r.body)
		var again submitted
		r.decode(t, &again)
		require.Equal(t, first.ID, again.ID)
		require.True(t, again.Duplicate)
		require.Equal(t, 1, b.CountJobs(t))
	})

	t.Run("ABatchEnqueuesEverySpec", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.do(t, "POST", "/v1/jobs:batch", `{"jobs":[
			{"topic":"a","args":{"x":1}},
			{"topic":"b","priority":0,"run_at":"2030-01-02T03:04:05Z"},
			{"topic":"c","idempotency_key":"k"},
			{"topic":"c","idempotency_key":"k"}]}`)
		require.Equal(t, http.StatusCreated, r.status, string(r.body))
		var out struct {
			Results []submitted `json:"results"`
		}
		r.decode(t, &out)
		require.Len(t, out.Results, 4)
		require.Equal(t, out.Results[2].ID, out.Results[3].ID)
		require.True(t, out.Results[3].Duplicate)
		require.Equal(t, 3, b.CountJobs(t))

		delayed := b.getJob(t, out.Results[1].ID)
		require.Equal(t, 0, delayed.Priority, "an explicit 0 is not the default")
		require.Equal(t, "2030-01-02T03:04:05Z", *delayed.NextRunAt)
	})

	t.Run("BigIntegerArgsRoundTripByteExact", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		args := `{"n":12345678901234567890,"f":1.000000000000000000001,"html":"<b>&amp;</b>"}`
		s := b.submit(t, `{"topic":"big","args":`+args+`}`)
		r := b.do(t, "GET", "/v1/jobs/"+s.ID, "")
		require.Equal(t, http.StatusOK, r.status)
		var raw struct {
			Args json.RawMessage `json:"args"`
		}
		r.decode(t, &raw)
		// jsonb orders keys (shorter first) and the response is compact.
		require.Equal(t, `{"f":1.000000000000000000001,"n":12345678901234567890,"html":"<b>&amp;</b>"}`, string(raw.Args))
		require.True(t, bytes.Contains(r.body, []byte(`12345678901234567890`)))
	})

	t.Run("TheCallersTraceContextIsStoredOnTheJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		r := b.do(t, "POST", "/v1/jobs", `{"topic":"traced"}`, "traceparent", tp)
		require.Equal(t, http.StatusCreated, r.status)
		var s submitted
		r.decode(t, &s)
		require.Equal(t, tp, b.getJob(t, s.ID).Traceparent)
	})
}
