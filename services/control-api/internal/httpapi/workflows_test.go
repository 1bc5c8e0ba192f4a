package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"

	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

func setupWorkflows(t *testing.T) *testBundle {
	t.Helper()
	b := apitest.New(t, apitest.Options{MaxArgsBytes: maxArgsBytes, MaxBatchJobs: 10})
	mux := http.NewServeMux()
	h := httpapi.New(b.Service, httpapi.Options{MaxArgsBytes: maxArgsBytes})
	h.Register(mux)
	h.RegisterWorkflows(mux, b.Service)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testBundle{Bundle: b, url: srv.URL}
}

// The workflow routes: a diamond's status as its jobs settle, failed at
// the step that dead-lettered, retried from it, canceled; and what a
// hostile or careless caller sends, refused naming the field.
func TestWorkflowRoutes(t *testing.T) {
	t.Parallel()
	b := setupWorkflows(t)
	ctx := context.Background()

	r := b.do(t, "POST", "/v1/jobs:batch", `{"jobs":[{"topic":"wf.a"},{"topic":"wf.b","depends_on":["$0"]},
		{"topic":"wf.c","depends_on":["$0"]},{"topic":"wf.d","depends_on":["$1","$2"]}]}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var batch pulsehttp.BatchResult
	r.decode(t, &batch)
	a, bID := batch.Results[0].ID, batch.Results[1].ID

	get := func() pulsehttp.Workflow {
		t.Helper()
		r := b.do(t, "GET", "/v1/workflows/"+a, "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var w pulsehttp.Workflow
		r.decode(t, &w)
		return w
	}
	w := get()
	require.Equal(t, "running", w.Status)
	require.Equal(t, &pulsehttp.WorkflowCounts{Pending: 4, Blocked: 3, Total: 4}, w.Counts)
	require.Nil(t, w.FailedStep)

	// a completes; b dead-letters (d is canceled by it); c is left.
	claimed, err := b.Store.Claim(ctx, []string{"wf.a"}, []string{"w"}, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	_, err = b.Pool.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED', lease_until = NULL, finished_at = clock_timestamp() WHERE id = $1`, a)
	require.NoError(t, err)
	claimed, err = b.Store.Claim(ctx, []string{"wf.b"}, []string{"w"}, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	_, err = b.Pool.Exec(ctx, `UPDATE jobs SET status = 'DEAD_LETTERED', lease_until = NULL, finished_at = clock_timestamp(),
		errors = errors || '[{"attempt":1,"error":"render failed: <boom>","worker":"w","at":"2026-11-26T00:00:00Z"}]' WHERE id = $1`, bID)
	require.NoError(t, err)

	w = get()
	require.Equal(t, "running", w.Status, "c can still run")
	require.NotNil(t, w.FailedStep)
	require.Equal(t, bID, w.FailedStep.ID)
	require.Equal(t, "DEAD_LETTERED", w.FailedStep.Status)
	require.Equal(t, "render failed: <boom>", w.FailedStep.Error)
	require.Equal(t, int64(1), w.Counts.Canceled)

	r = b.do(t, "GET", "/v1/workflows?status=running", "")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var list pulsehttp.WorkflowList
	r.decode(t, &list)
	require.Len(t, list.Workflows, 1)
	require.Nil(t, list.Workflows[0].Counts)
	r = b.do(t, "GET", "/v1/workflows?status=DONE&limit=5", "")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	list = pulsehttp.WorkflowList{}
	r.decode(t, &list)
	require.Empty(t, list.Workflows)

	// Cancel stops c: nothing is live, a job dead-lettered: failed.
	r = b.do(t, "POST", "/v1/workflows/"+a+"/cancel", "")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var act pulsehttp.WorkflowAction
	r.decode(t, &act)
	require.Equal(t, int64(1), act.Jobs)
	require.Equal(t, "failed", act.Workflow.Status)
	require.Equal(t, bID, act.Workflow.FailedStep.ID)
	requireError(t, b.do(t, "POST", "/v1/workflows/"+a+"/cancel", ""), http.StatusConflict, "invalid_transition", "")

	// Retry from the failed step: b, c and d come back, d waiting.
	r = b.do(t, "POST", "/v1/workflows/"+a+"/retry", "")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	act = pulsehttp.WorkflowAction{}
	r.decode(t, &act)
	require.Equal(t, int64(3), act.Jobs)
	require.Equal(t, "running", act.Workflow.Status)
	require.Equal(t, &pulsehttp.WorkflowCounts{Pending: 3, Completed: 1, Blocked: 1, Total: 4}, act.Workflow.Counts)
	requireError(t, b.do(t, "POST", "/v1/workflows/"+a+"/retry", ""), http.StatusConflict, "invalid_transition", "")

	before := b.CountJobs(t)
	requireError(t, b.do(t, "GET", "/v1/workflows/not-a-uuid", ""), http.StatusBadRequest, "invalid_argument", "id")
	requireError(t, b.do(t, "POST", "/v1/workflows/%00/cancel", ""), http.StatusBadRequest, "invalid_argument", "id")
	requireError(t, b.do(t, "GET", "/v1/workflows/"+bID, ""), http.StatusNotFound, "not_found", "")
	requireError(t, b.do(t, "POST", "/v1/workflows/01936c4e-0000-7000-8000-000000000000/retry", ""), http.StatusNotFound, "not_found", "")
	for query, field := range map[string]string{
		"status=bogus":         "status",
		"status=%00":           "status",
		"status=%ff%fe":        "status",
		"limit=0":              "limit",
		"limit=-3":             "limit",
		"limit=501":            "limit",
		"limit=99999999999999": "limit",
		"page_token=AAAA":      "page_token",
		"page_token=%00":       "page_token",
		"topic=wf.a":           "topic",
		"status=running&x=%ff": "",
	} {
		r := b.do(t, "GET", "/v1/workflows?"+query, "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", query, r.body)
		if field != "" {
			requireError(t, r, http.StatusBadRequest, "invalid_argument", field)
		}
	}
	require.Equal(t, before, b.CountJobs(t))
}
