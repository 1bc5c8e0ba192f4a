package api

import (
	"context"
	"log/slog"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// WorkflowStore is the part of jobstore.Store the workflow view uses.
type WorkflowStore interface {
	GetWorkflow(ctx context.Context, id uuid.UUID) (*jobstore.Workflow, error)
	ListWorkflows(ctx context.Context, f jobstore.WorkflowFilter) (jobstore.WorkflowPage, error)
	CancelWorkflow(ctx context.Context, id uuid.UUID) (int64, *jobstore.Workflow, error)
	RetryWorkflow(ctx context.Context, id uuid.UUID) (int64, *jobstore.Workflow, error)
	WorkflowGraph(ctx context.Context, id uuid.UUID, maxJobs, maxEdges int) (jobstore.WorkflowGraph, error)
}

// The most of a workflow's graph the dashboard reads: its drawing is
// capped far below (workflowgraph's limits); these bound what one page
// view costs Postgres and control-api's memory.
const (
	WorkflowGraphMaxJobs  = 20_000
	WorkflowGraphMaxEdges = 40_000
)

// WorkflowGraph reads a workflow's jobs and edges for the dashboard's
// drawing, up to WorkflowGraphMaxJobs and WorkflowGraphMaxEdges.
func (s *ControlService) WorkflowGraph(ctx context.Context, rawID string) (jobstore.WorkflowGraph, error) {
	id, err := ParseJobID("id", rawID)
	if err != nil {
		return jobstore.WorkflowGraph{}, err
	}
	return s.store.WorkflowGraph(ctx, id, WorkflowGraphMaxJobs, WorkflowGraphMaxEdges)
}

// workflowStatusToWire maps the derived statuses to the wire's.
var workflowStatusToWire = map[jobstore.WorkflowStatus]pulsev1.WorkflowStatus{
	jobstore.WorkflowRunning:  pulsev1.WorkflowStatus_WORKFLOW_STATUS_RUNNING,
	jobstore.WorkflowFailed:   pulsev1.WorkflowStatus_WORKFLOW_STATUS_FAILED,
	jobstore.WorkflowCanceled: pulsev1.WorkflowStatus_WORKFLOW_STATUS_CANCELED,
	jobstore.WorkflowDone:     pulsev1.WorkflowStatus_WORKFLOW_STATUS_DONE,
}

// WorkflowStatusFromWire maps a wire status filter to the store's;
// UNSPECIFIED means no filter ("").
func WorkflowStatusFromWire(field string, s pulsev1.WorkflowStatus) (jobstore.WorkflowStatus, error) {
	if s == pulsev1.WorkflowStatus_WORKFLOW_STATUS_UNSPECIFIED {
		return "", nil
	}
	for stored, wire := range workflowStatusToWire {
		if wire == s {
			return stored, nil
		}
	}
	return "", apierr.Invalid(field, "%d is not a known workflow status", int32(s))
}

// WorkflowToWire converts a workflow to its wire form; counts only when
// withCounts (a listing has none).
func WorkflowToWire(w *jobstore.Workflow, withCounts bool) *pulsev1.Workflow {
	out := &pulsev1.Workflow{
		Id: w.ID.String(), Status: workflowStatusToWire[w.Status], Topic: w.Topic,
		SubmittedAt: timestamppb.New(w.SubmittedAt), FinishedAt: timestampOrNil(w.FinishedAt),
	}
	if withCounts {
		c := w.Counts
		out.Counts = &pulsev1.WorkflowCounts{
			Pending: c.Pending, Running: c.Running, Retrying: c.Retrying, Completed: c.Completed,
			DeadLettered: c.DeadLettered, Canceled: c.Canceled, Blocked: c.Blocked, Total: c.Total(),
		}
	}
	if st := w.FailedStep; st != nil {
		out.FailedStep = &pulsev1.WorkflowStep{
			Id: st.ID.String(), Topic: st.Topic, Status: statusToWire[st.Status],
			FinishedAt: timestampOrNil(st.FinishedAt), Error: st.Error,
		}
	}
	return out
}

// GetWorkflow reads a workflow's status, derived from its jobs.
func (s *ControlService) GetWorkflow(ctx context.Context, req *pulsev1.GetWorkflowRequest) (*pulsev1.GetWorkflowResponse, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	w, err := s.store.GetWorkflow(ctx, id)
	if err != nil {
		return nil, err
	}
	return &pulsev1.GetWorkflowResponse{Workflow: WorkflowToWire(w, true)}, nil
}

// ListWorkflows pages workflows newest first, by status when asked.
func (s *ControlService) ListWorkflows(ctx context.Context, req *pulsev1.ListWorkflowsRequest) (*pulsev1.ListWorkflowsResponse, error) {
	status, err := WorkflowStatusFromWire("status", req.GetStatus())
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = ListLimitDefault
	case limit < 0 || limit > ListLimitMax:
		return nil, apierr.Invalid("limit", "is %d; it must be 1..%d", limit, ListLimitMax)
	}
	f := jobstore.WorkflowFilter{Status: status, Limit: limit}
	if tok := req.GetPageToken(); tok != "" {
		id, err := decodeWorkflowToken(tok)
		if err != nil {
			return nil, err
		}
		f.Before = &id
	}
	page, err := s.store.ListWorkflows(ctx, f)
	if err != nil {
		return nil, err
	}
	out := &pulsev1.ListWorkflowsResponse{}
	for _, w := range page.Workflows {
		out.Workflows = append(out.Workflows, WorkflowToWire(&jobstore.Workflow{
			ID: w.ID, Topic: w.Topic, Status: w.Status, SubmittedAt: w.SubmittedAt,
		}, false))
	}
	if page.Next != nil {
		out.NextPageToken = encodePageToken(*page.Next)
	}
	return out, nil
}

func decodeWorkflowToken(tok string) (uuid.UUID, error) {
	b, ok := decodeToken(tok)
	if !ok || len(b) != len(uuid.UUID{}) {
		return uuid.Nil, apierr.Invalid("page_token", "%q is not a page token from an earlier ListWorkflows answer", tok)
	}
	return uuid.UUID(b), nil
}

// CancelWorkflow cancels every live job of a workflow in one statement.
// Operator-only; logged with the actor.
func (s *ControlService) CancelWorkflow(ctx context.Context, req *pulsev1.CancelWorkflowRequest) (*pulsev1.CancelWorkflowResponse, error) {
	n, w, err := s.workflowAction(ctx, "cancel", req.GetId(), s.store.CancelWorkflow)
	if err != nil {
		return nil, err
	}
	return &pulsev1.CancelWorkflowResponse{Canceled: n, Workflow: WorkflowToWire(w, true)}, nil
}

// RetryWorkflow retries every dead-lettered and canceled job of a
// workflow in one statement: retry from the failed step. Operator-only;
// logged with the actor.
func (s *ControlService) RetryWorkflow(ctx context.Context, req *pulsev1.RetryWorkflowRequest) (*pulsev1.RetryWorkflowResponse, error) {
	n, w, err := s.workflowAction(ctx, "retry", req.GetId(), s.store.RetryWorkflow)
	if err != nil {
		return nil, err
	}
	return &pulsev1.RetryWorkflowResponse{Retried: n, Workflow: WorkflowToWire(w, true)}, nil
}

func (s *ControlService) workflowAction(ctx context.Context, action, rawID string,
	do func(context.Context, uuid.UUID) (int64, *jobstore.Workflow, error),
) (int64, *jobstore.Workflow, error) {
	id, err := ParseJobID("id", rawID)
	if err != nil {
		return 0, nil, err
	}
	actor := actorOf(ctx)
	n, w, err := do(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	s.opts.Metrics.workflowAction(action, n)
	s.logger().InfoContext(ctx, "workflow "+map[string]string{"cancel": "canceled", "retry": "retried"}[action],
		"workflow_id", id.String(), "actor", actor, "jobs", n, "status", string(w.Status))
	return n, w, nil
}

func (s *ControlService) logger() *slog.Logger {
	if s.opts.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.opts.Logger
}
