package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// WorkflowService is the workflow view's part of api.ControlService.
type WorkflowService interface {
	GetWorkflow(ctx context.Context, req *pulsev1.GetWorkflowRequest) (*pulsev1.GetWorkflowResponse, error)
	ListWorkflows(ctx context.Context, req *pulsev1.ListWorkflowsRequest) (*pulsev1.ListWorkflowsResponse, error)
	CancelWorkflow(ctx context.Context, req *pulsev1.CancelWorkflowRequest) (*pulsev1.CancelWorkflowResponse, error)
	RetryWorkflow(ctx context.Context, req *pulsev1.RetryWorkflowRequest) (*pulsev1.RetryWorkflowResponse, error)
}

// RegisterWorkflows mounts the workflow routes on mux.
func (h *Handler) RegisterWorkflows(mux Mux, svc WorkflowService) {
	h.mount(mux, "GET /v1/workflows", h.route(func(w http.ResponseWriter, r *http.Request) error { return listWorkflows(w, r, svc) }))
	h.mount(mux, "GET /v1/workflows/{id}", h.route(func(w http.ResponseWriter, r *http.Request) error {
		resp, err := svc.GetWorkflow(r.Context(), &pulsev1.GetWorkflowRequest{Id: r.PathValue("id")})
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, WorkflowToJSON(resp.GetWorkflow()))
	}))
	h.mount(mux, "POST /v1/workflows/{id}/cancel", h.route(func(w http.ResponseWriter, r *http.Request) error {
		resp, err := svc.CancelWorkflow(r.Context(), &pulsev1.CancelWorkflowRequest{Id: r.PathValue("id")})
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, pulsehttp.WorkflowAction{Jobs: resp.GetCanceled(), Workflow: WorkflowToJSON(resp.GetWorkflow())})
	}))
	h.mount(mux, "POST /v1/workflows/{id}/retry", h.route(func(w http.ResponseWriter, r *http.Request) error {
		resp, err := svc.RetryWorkflow(r.Context(), &pulsev1.RetryWorkflowRequest{Id: r.PathValue("id")})
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, pulsehttp.WorkflowAction{Jobs: resp.GetRetried(), Workflow: WorkflowToJSON(resp.GetWorkflow())})
	}))
}

// workflowListParams are the query parameters GET /v1/workflows
// understands.
var workflowListParams = []string{"status", "limit", "page_token"}

func listWorkflows(w http.ResponseWriter, r *http.Request, svc WorkflowService) error {
	q := r.URL.Query()
	if err := onlyParams(q, workflowListParams); err != nil {
		return err
	}
	req := &pulsev1.ListWorkflowsRequest{PageToken: q.Get("page_token")}
	if s := q.Get("status"); s != "" {
		st, err := ParseWorkflowStatus(s)
		if err != nil {
			return err
		}
		req.Status = st
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return apierr.Invalid("limit", "%q is not a whole number", s)
		}
		if n == 0 {
			return apierr.Invalid("limit", "is 0; it must be between 1 and %d", api.ListLimitMax)
		}
		req.Limit = int32(n)
	}
	resp, err := svc.ListWorkflows(r.Context(), req)
	if err != nil {
		return err
	}
	out := pulsehttp.WorkflowList{Workflows: make([]pulsehttp.Workflow, len(resp.GetWorkflows())), NextPageToken: resp.GetNextPageToken()}
	for i, wf := range resp.GetWorkflows() {
		out.Workflows[i] = WorkflowToJSON(wf)
	}
	return writeJSON(w, http.StatusOK, out)
}

// ParseWorkflowStatus reads a workflow status as a query spells it
// (running, failed, canceled, done; any case).
func ParseWorkflowStatus(s string) (pulsev1.WorkflowStatus, error) {
	name := strings.TrimPrefix(strings.ToUpper(s), "WORKFLOW_STATUS_")
	if v, ok := pulsev1.WorkflowStatus_value["WORKFLOW_STATUS_"+name]; ok && v != 0 {
		return pulsev1.WorkflowStatus(v), nil
	}
	return 0, apierr.Invalid("status", "%q is not one of running, failed, canceled, done", s)
}

// WorkflowStatusName is a workflow status as the JSON API spells it.
func WorkflowStatusName(s pulsev1.WorkflowStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_STATUS_"))
}

// WorkflowToJSON is a workflow as the HTTP API shows it.
func WorkflowToJSON(wf *pulsev1.Workflow) pulsehttp.Workflow {
	out := pulsehttp.Workflow{
		ID: wf.GetId(), Status: WorkflowStatusName(wf.GetStatus()), Topic: wf.GetTopic(),
		SubmittedAt: api.TimeFromWire(wf.GetSubmittedAt()), FinishedAt: api.TimeFromWire(wf.GetFinishedAt()),
	}
	if c := wf.GetCounts(); c != nil {
		out.Counts = &pulsehttp.WorkflowCounts{
			Pending: c.GetPending(), Running: c.GetRunning(), Retrying: c.GetRetrying(), Completed: c.GetCompleted(),
			DeadLettered: c.GetDeadLettered(), Canceled: c.GetCanceled(), Blocked: c.GetBlocked(), Total: c.GetTotal(),
		}
	}
	if st := wf.GetFailedStep(); st != nil {
		out.FailedStep = &pulsehttp.WorkflowStep{
			ID: st.GetId(), Topic: st.GetTopic(), Status: strings.TrimPrefix(st.GetStatus().String(), "JOB_STATUS_"),
			FinishedAt: api.TimeFromWire(st.GetFinishedAt()), Error: st.GetError(),
		}
	}
	return out
}
