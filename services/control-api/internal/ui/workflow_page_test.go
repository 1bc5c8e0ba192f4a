package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/ui"
)

// hostileGraph is the real service whose graph carries hostile text, as a
// topic could if the charset rule ever loosened: the page must escape it.
type hostileGraph struct{ *api.ControlService }

const hostile = `</svg><script>alert(1)</script><img src=x onerror=alert(2)>"'&`

func (h hostileGraph) WorkflowGraph(ctx context.Context, id string) (jobstore.WorkflowGraph, error) {
	g, err := h.ControlService.WorkflowGraph(ctx, id)
	for i := range g.Jobs {
		g.Jobs[i].Topic = hostile
	}
	return g, err
}

func workflowSetup(t *testing.T, svc func(*api.ControlService) ui.WorkflowService) (*testBundle, *browser, *browser) {
	t.Helper()
	b := apitest.New(t, apitest.Options{})
	var ws ui.WorkflowService = b.Service
	if svc != nil {
		ws = svc(b.Service)
	}
	d := ui.New(b.Service, api.NewDispatchControl(b.Store, api.DispatchOptions{}), api.NewSchedules(b.Store, nil, nil),
		ui.Options{Workflows: ws})
	mux := http.NewServeMux()
	d.Register(mux)
	authn, err := auth.New(operatorName+":operator:op-pass,"+producerName+":producer:prod-pass", "")
	require.NoError(t, err)
	srv := httptest.NewServer(auth.Middleware(authn, auth.HTTPPolicy(ui.AccessPolicy()), d.WriteAuthError)(mux))
	t.Cleanup(srv.Close)
	tb := &testBundle{Bundle: b, server: srv}
	return tb, tb.browser(t, operatorAuth), tb.browser(t, producerAuth)
}

func submitDiamond(t *testing.T, tb *testBundle) []string {
	t.Helper()
	dep := func(n ...string) []*pulsev1.Dependency {
		var out []*pulsev1.Dependency
		for _, x := range n {
			out = append(out, &pulsev1.Dependency{Job: x})
		}
		return out
	}
	resp, err := tb.Service.SubmitJobs(t.Context(), &pulsev1.SubmitJobsRequest{Jobs: []*pulsev1.JobSpec{
		{Topic: "wf.a"}, {Topic: "wf.b", DependsOn: dep("$0")}, {Topic: "wf.c", DependsOn: dep("$0")},
		{Topic: "wf.d", DependsOn: dep("$1", "$2")},
	}})
	require.NoError(t, err)
	var ids []string
	for _, r := range resp.GetResults() {
		ids = append(ids, r.GetId())
	}
	return ids
}

var nodeRE = regexp.MustCompile(`<a href="/ui/jobs/([0-9a-f-]+)" class="wf-node wf-([a-z_]+)" data-job="[^"]+" data-status="([A-Z_]+)" data-layer="(\d+)"`)

// The workflow page: its status, counts and failed step, the graph with
// a box per job coloured by state in its layer and linking to the job's
// page, and the operator's cancel and retry.
func TestWorkflowPage(t *testing.T) {
	t.Parallel()
	tb, op, prod := workflowSetup(t, nil)
	ctx := t.Context()
	ids := submitDiamond(t, tb)

	code, body := prod.get("/ui/workflows/" + ids[0])
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="workflow-status">running<`)
	require.NotContains(t, body, `id="workflow-cancel"`, "a producer gets no forms")
	layers := map[string]string{}
	for _, m := range nodeRE.FindAllStringSubmatch(body, -1) {
		layers[m[1]] = m[4]
		require.Equal(t, strings.ToLower(m[3]), m[2])
	}
	require.Equal(t, map[string]string{ids[0]: "0", ids[1]: "1", ids[2]: "1", ids[3]: "2"}, layers)
	require.Equal(t, 4, strings.Count(body, `<path class="wf-edge"`))

	// b dead-letters: d is canceled, the page says where it failed.
	_, err := tb.Pool.Exec(ctx, `UPDATE jobs SET status = 'CANCELED', finished_at = now() WHERE id = $1`, ids[0])
	require.NoError(t, err)
	code, body = op.get("/ui/workflows/" + ids[0])
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="workflow-status">canceled<`)
	require.Contains(t, body, `id="failed-step"><b>Canceled at</b>`)
	require.Contains(t, body, `id="workflow-retry"`)
	require.NotContains(t, body, `id="workflow-cancel"`, "nothing live to cancel")
	require.Equal(t, 4, strings.Count(body, `data-status="CANCELED"`))

	code, loc, _ := op.post("/ui/workflows/"+ids[0]+"/retry", url.Values{"back": {"/ui/workflows/" + ids[0]}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/ui/workflows/"+ids[0], loc)
	_, body = op.get(loc)
	require.Contains(t, body, "Retried 4 job(s) of workflow")
	require.Contains(t, body, `id="workflow-status">running<`)

	code, loc, _ = op.post("/ui/workflows/"+ids[0]+"/cancel", url.Values{})
	require.Equal(t, http.StatusSeeOther, code)
	_, body = op.get(loc)
	require.Contains(t, body, "Canceled 4 job(s) of workflow")
	code, loc, _ = op.post("/ui/workflows/"+ids[0]+"/cancel", url.Values{})
	require.Equal(t, http.StatusSeeOther, code)
	_, body = op.get(loc)
	require.Contains(t, body, "Cancel: cannot cancel workflow")

	// Producers read, never act; the job page links to its workflow.
	code, _, _ = prod.post("/ui/workflows/"+ids[0]+"/retry", url.Values{})
	require.Equal(t, http.StatusForbidden, code)
	_, body = prod.get("/ui/jobs/" + ids[2])
	require.Contains(t, body, `<a id="workflow-link" href="/ui/workflows/`+ids[0]+`">`)

	// The list, by status.
	_, body = prod.get("/ui/workflows?status=canceled")
	require.Contains(t, body, `data-workflow="`+ids[0]+`"`)
	_, body = prod.get("/ui/workflows?status=done")
	require.NotContains(t, body, `data-workflow="`)
	code, body = prod.get("/ui/workflows?status=%3Cscript%3E")
	require.Equal(t, http.StatusBadRequest, code)
	require.NotContains(t, body, "<script>")

	code, _ = prod.get("/ui/workflows/" + ids[1])
	require.Equal(t, http.StatusNotFound, code, "only the first job's id names a workflow")
	code, _ = prod.get("/ui/workflows/not-a-uuid")
	require.Equal(t, http.StatusBadRequest, code)
}

// Hostile text in a topic and in an error reaches the page escaped: no
// element, no attribute breaks out of the SVG or the page.
func TestWorkflowPageEscapesHostileText(t *testing.T) {
	t.Parallel()
	tb, op, _ := workflowSetup(t, func(s *api.ControlService) ui.WorkflowService { return hostileGraph{s} })
	ids := submitDiamond(t, tb)
	_, err := tb.Pool.Exec(t.Context(), `UPDATE jobs SET status = 'RUNNING', attempts = 1, locked_by = 'w',
		lease_until = now() + interval '1 minute', started_at = now() WHERE id = $1`, ids[0])
	require.NoError(t, err)
	_, err = tb.Pool.Exec(t.Context(), `UPDATE jobs SET status = 'DEAD_LETTERED', lease_until = NULL, finished_at = now(),
		errors = errors || jsonb_build_array(jsonb_build_object('attempt', 1, 'error', $2::text, 'worker', 'w', 'at', now())) WHERE id = $1`,
		ids[0], hostile)
	require.NoError(t, err)

	code, body := op.get("/ui/workflows/" + ids[0])
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "<script>alert")
	require.NotContains(t, body, "<img src=x")
	require.NotContains(t, body, "</svg><script>")
	require.Contains(t, body, "&lt;/svg&gt;&lt;script&gt;alert(1)&lt;/script&gt;")
	require.Equal(t, 1, strings.Count(body, "</svg>"), "the drawing's own end only")
	require.Equal(t, 1, strings.Count(body, "<script"), "the page's own script only")
	require.Contains(t, body, `id="failed-error">&lt;/svg&gt;`)
}

// A 10,000-job fan-out draws a capped graph: one box for the root, 25 for
// the children's layer and a box counting the rest, by state.
func TestWorkflowPageCapsALargeGraph(t *testing.T) {
	t.Parallel()
	tb, op, _ := workflowSetup(t, nil)
	const children = 10_000
	specs := []*pulsev1.JobSpec{{Topic: "wf.root"}}
	for range children {
		specs = append(specs, &pulsev1.JobSpec{Topic: "wf.child", DependsOn: []*pulsev1.Dependency{{Job: "$0"}}})
	}
	big, err := api.NewControlService(tb.Store, tb.Coalescer, api.Options{MaxBatchJobs: children + 1}).SubmitJobs(t.Context(), &pulsev1.SubmitJobsRequest{Jobs: specs})
	require.NoError(t, err)
	id := big.GetResults()[0].GetId()

	code, body := op.get("/ui/workflows/" + id)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, fmt.Sprintf(`data-jobs="%d" data-drawn="26" data-layers="2"`, children+1))
	require.Equal(t, 26, len(nodeRE.FindAllString(body, -1)))
	require.Contains(t, body, `<g class="wf-summary" data-count="9975" data-layer="1">`)
	require.Contains(t, body, "9975 pending")
	require.Equal(t, 25, strings.Count(body, `<path class="wf-edge"`))
	require.Less(t, len(body), 200_000, "the page is a summary, not 10,000 boxes")
}
