package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
	"github.com/pulsequeue/pulse/services/control-api/internal/workflowgraph"
)

// WorkflowService is the part of api.ControlService the workflow pages
// call.
type WorkflowService interface {
	GetWorkflow(ctx context.Context, req *pulsev1.GetWorkflowRequest) (*pulsev1.GetWorkflowResponse, error)
	ListWorkflows(ctx context.Context, req *pulsev1.ListWorkflowsRequest) (*pulsev1.ListWorkflowsResponse, error)
	CancelWorkflow(ctx context.Context, req *pulsev1.CancelWorkflowRequest) (*pulsev1.CancelWorkflowResponse, error)
	RetryWorkflow(ctx context.Context, req *pulsev1.RetryWorkflowRequest) (*pulsev1.RetryWorkflowResponse, error)
	WorkflowGraph(ctx context.Context, id string) (jobstore.WorkflowGraph, error)
}

// errNoWorkflows answers the workflow pages of a dashboard built without
// Options.Workflows.
var errNoWorkflows = apierr.NotFound("page", "/ui/workflows")

// workflowListView is the workflows page.
type workflowListView struct {
	Status    string
	Statuses  []string
	Workflows []workflowRow
	NextURL   string
	// Windowed says a filtered page may have stopped early (ListWorkflows
	// examines a window of workflows).
	Windowed bool
}

type workflowRow struct {
	ID        string
	Status    string
	Topic     string
	Submitted *time.Time
}

// workflowView is one workflow's page: its status, counts, failed step,
// actions and graph.
type workflowView struct {
	ID         string
	Status     string
	Topic      string
	Submitted  *time.Time
	Finished   *time.Time
	Counts     *pulsev1.WorkflowCounts
	FailedStep *failedStepView
	CanCancel  bool
	CanRetry   bool
	Graph      graphView
}

type failedStepView struct {
	ID, Topic, Status, Error string
	Finished                 *time.Time
}

// graphView is the graph's drawing, placed by workflowgraph: the
// template only writes what it is given.
type graphView struct {
	workflowgraph.Layout
	Title, Desc string
	// Truncated says the workflow has more jobs (or edges) than the page
	// reads; Hidden how many jobs have no box of their own.
	Truncated bool
	Hidden    int
	Error     string
	// NodeW and NodeH are a box's size.
	NodeW, NodeH int
}

func (d *Dashboard) workflowList(w http.ResponseWriter, r *http.Request) error {
	if d.opts.Workflows == nil {
		return errNoWorkflows
	}
	q := r.URL.Query()
	view := workflowListView{Status: strings.ToLower(q.Get("status")), Statuses: []string{"running", "failed", "canceled", "done"}}
	req := &pulsev1.ListWorkflowsRequest{Limit: 50, PageToken: q.Get("page_token")}
	if view.Status != "" {
		st, err := httpapi.ParseWorkflowStatus(view.Status)
		if err != nil {
			return err
		}
		req.Status = st
		view.Windowed = true
	}
	resp, err := d.opts.Workflows.ListWorkflows(r.Context(), req)
	if err != nil {
		return err
	}
	for _, wf := range resp.GetWorkflows() {
		view.Workflows = append(view.Workflows, workflowRow{
			ID: wf.GetId(), Status: httpapi.WorkflowStatusName(wf.GetStatus()), Topic: wf.GetTopic(),
			Submitted: api.TimeFromWire(wf.GetSubmittedAt()),
		})
	}
	if tok := resp.GetNextPageToken(); tok != "" {
		v := url.Values{"page_token": {tok}}
		if view.Status != "" {
			v.Set("status", view.Status)
		}
		view.NextURL = withQuery("/ui/workflows", v)
	}
	d.render(w, r, http.StatusOK, "workflows", view)
	return nil
}

func (d *Dashboard) workflowDetail(w http.ResponseWriter, r *http.Request) error {
	if d.opts.Workflows == nil {
		return errNoWorkflows
	}
	id := r.PathValue("id")
	resp, err := d.opts.Workflows.GetWorkflow(r.Context(), &pulsev1.GetWorkflowRequest{Id: id})
	if err != nil {
		return err
	}
	wf := resp.GetWorkflow()
	c := wf.GetCounts()
	view := workflowView{
		ID: wf.GetId(), Status: httpapi.WorkflowStatusName(wf.GetStatus()), Topic: wf.GetTopic(),
		Submitted: api.TimeFromWire(wf.GetSubmittedAt()), Finished: api.TimeFromWire(wf.GetFinishedAt()),
		Counts:    c,
		CanCancel: c.GetPending()+c.GetRunning()+c.GetRetrying() > 0,
		CanRetry:  c.GetDeadLettered()+c.GetCanceled() > 0,
	}
	if st := wf.GetFailedStep(); st != nil {
		view.FailedStep = &failedStepView{ID: st.GetId(), Topic: st.GetTopic(), Status: statusName(st.GetStatus()),
			Error: st.GetError(), Finished: api.TimeFromWire(st.GetFinishedAt())}
	}
	g, err := d.opts.Workflows.WorkflowGraph(r.Context(), id)
	if err != nil {
		if !isClientError(err) {
			return err
		}
		view.Graph.Error = err.Error() // the workflow went (retention) between the two reads
	} else {
		view.Graph = graphOf(g)
	}
	d.render(w, r, http.StatusOK, "workflow", view)
	return nil
}

// graphOf lays g out for the page.
func graphOf(g jobstore.WorkflowGraph) graphView {
	nodes := make([]workflowgraph.Node, len(g.Jobs))
	for i, j := range g.Jobs {
		nodes[i] = workflowgraph.Node{ID: j.ID.String(), Label: j.Topic, Status: string(j.Status)}
	}
	edges := make([]workflowgraph.Edge, len(g.Edges))
	for i, e := range g.Edges {
		edges[i] = workflowgraph.Edge{Parent: e.Parent.String(), Child: e.Child.String()}
	}
	l := workflowgraph.Lay(nodes, edges, workflowgraph.Limits{})
	v := graphView{Layout: l, Truncated: g.Truncated, Hidden: l.Jobs - l.Drawn,
		NodeW: workflowgraph.NodeWidth, NodeH: workflowgraph.NodeHeight}
	v.Title = fmt.Sprintf("Workflow graph: %d jobs in %d layers", l.Jobs, l.Layers)
	v.Desc = fmt.Sprintf("%d jobs drawn, %d summarised; %d of %d dependencies drawn.", l.Drawn, v.Hidden, len(l.Lines), l.Edges)
	return v
}

func (d *Dashboard) cancelWorkflow(w http.ResponseWriter, r *http.Request) error {
	if d.opts.Workflows == nil {
		return errNoWorkflows
	}
	id := r.PathValue("id")
	resp, err := d.opts.Workflows.CancelWorkflow(r.Context(), &pulsev1.CancelWorkflowRequest{Id: id})
	return d.afterAction(w, r, "/ui/workflows/"+url.PathEscape(id), err,
		fmt.Sprintf("Canceled %d job(s) of workflow %s", resp.GetCanceled(), id), "Cancel")
}

func (d *Dashboard) retryWorkflow(w http.ResponseWriter, r *http.Request) error {
	if d.opts.Workflows == nil {
		return errNoWorkflows
	}
	id := r.PathValue("id")
	resp, err := d.opts.Workflows.RetryWorkflow(r.Context(), &pulsev1.RetryWorkflowRequest{Id: id})
	return d.afterAction(w, r, "/ui/workflows/"+url.PathEscape(id), err,
		fmt.Sprintf("Retried %d job(s) of workflow %s from its failed step", resp.GetRetried(), id), "Retry")
}
