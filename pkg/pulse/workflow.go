package pulse

import (
	"context"
	"fmt"
	"strings"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// The workflow statuses (WorkflowInfo.Status): derived by control-api from
// a workflow's jobs on every read (docs/workflows.md).
const (
	// WorkflowRunning: some job is PENDING, RUNNING or RETRYING.
	WorkflowRunning = "running"
	// WorkflowFailed: nothing is live and some job was dead-lettered.
	WorkflowFailed = "failed"
	// WorkflowCanceled: nothing is live, none was dead-lettered, some job
	// was canceled.
	WorkflowCanceled = "canceled"
	// WorkflowDone: every job completed.
	WorkflowDone = "done"
)

// WorkflowInfo is a workflow — the jobs one [Client.EnqueueMany] call
// submitted with dependencies between them — as control-api derives it
// from its jobs. Its ID is the id of its first job.
type WorkflowInfo struct {
	ID     string
	Status string
	// Topic is its first job's topic ("" once retention deleted it).
	Topic string
	// Counts are its jobs by status; zero in a listing.
	Counts WorkflowCounts
	// FailedStep is its first dead-lettered job, else its first canceled
	// one; nil while every finished job completed.
	FailedStep  *WorkflowStep
	SubmittedAt time.Time
	// FinishedAt is when its last job finished; nil while it runs.
	FinishedAt *time.Time
}

// WorkflowCounts counts a workflow's jobs by status; Blocked counts the
// PENDING ones still waiting for a parent.
type WorkflowCounts struct {
	Pending, Running, Retrying, Completed, DeadLettered, Canceled, Blocked, Total int64
}

// WorkflowStep is the job a workflow failed (or was canceled) at, with
// its last error.
type WorkflowStep struct {
	ID         string
	Topic      string
	Status     pulsetype.Status
	FinishedAt *time.Time
	Error      string
}

// Workflow reads a workflow's status by its id (its first job's id).
func (c *Client) Workflow(ctx context.Context, id string) (*WorkflowInfo, error) {
	resp, err := c.rpc.GetWorkflow(ctx, &pulsev1.GetWorkflowRequest{Id: id})
	if err != nil {
		return nil, fmt.Errorf("pulse: get workflow %s: %w", id, err)
	}
	return workflowFromProto(resp.GetWorkflow()), nil
}

// CancelWorkflow cancels every PENDING, RETRYING and RUNNING job of a
// workflow in one statement (operators only) and returns how many it
// canceled and the workflow after.
func (c *Client) CancelWorkflow(ctx context.Context, id string) (int64, *WorkflowInfo, error) {
	resp, err := c.rpc.CancelWorkflow(ctx, &pulsev1.CancelWorkflowRequest{Id: id})
	if err != nil {
		return 0, nil, fmt.Errorf("pulse: cancel workflow %s: %w", id, err)
	}
	return resp.GetCanceled(), workflowFromProto(resp.GetWorkflow()), nil
}

// RetryWorkflow retries a workflow from its failed step: every
// dead-lettered and canceled job back to PENDING in one statement, each
// waiting again for its unfinished parents (operators only). It returns
// how many it retried and the workflow after.
func (c *Client) RetryWorkflow(ctx context.Context, id string) (int64, *WorkflowInfo, error) {
	resp, err := c.rpc.RetryWorkflow(ctx, &pulsev1.RetryWorkflowRequest{Id: id})
	if err != nil {
		return 0, nil, fmt.Errorf("pulse: retry workflow %s: %w", id, err)
	}
	return resp.GetRetried(), workflowFromProto(resp.GetWorkflow()), nil
}

func workflowFromProto(w *pulsev1.Workflow) *WorkflowInfo {
	if w == nil {
		return nil
	}
	info := &WorkflowInfo{
		ID: w.GetId(), Topic: w.GetTopic(),
		Status:      strings.ToLower(strings.TrimPrefix(w.GetStatus().String(), "WORKFLOW_STATUS_")),
		SubmittedAt: w.GetSubmittedAt().AsTime(),
	}
	if w.GetFinishedAt() != nil {
		t := w.GetFinishedAt().AsTime()
		info.FinishedAt = &t
	}
	if c := w.GetCounts(); c != nil {
		info.Counts = WorkflowCounts{
			Pending: c.GetPending(), Running: c.GetRunning(), Retrying: c.GetRetrying(), Completed: c.GetCompleted(),
			DeadLettered: c.GetDeadLettered(), Canceled: c.GetCanceled(), Blocked: c.GetBlocked(), Total: c.GetTotal(),
		}
	}
	if st := w.GetFailedStep(); st != nil {
		step := &WorkflowStep{ID: st.GetId(), Topic: st.GetTopic(), Status: statusName(st.GetStatus()), Error: st.GetError()}
		if st.GetFinishedAt() != nil {
			t := st.GetFinishedAt().AsTime()
			step.FinishedAt = &t
		}
		info.FailedStep = step
	}
	return info
}
