package pulsehttp

import "time"

// Workflow is a workflow as GET /v1/workflows/{id} and the workflow list
// show it (docs/workflows.md): its status derived from its jobs.
type Workflow struct {
	// ID is the id of the workflow's first job.
	ID string `json:"id"`
	// Status is running, failed, canceled or done.
	Status string `json:"status"`
	// Topic is the topic of its first job ("" once retention deleted it).
	Topic string `json:"topic"`
	// Counts are its jobs by status; absent in a listing.
	Counts *WorkflowCounts `json:"counts,omitempty"`
	// FailedStep is its first dead-lettered job, else its first canceled
	// one; null while every finished job completed.
	FailedStep  *WorkflowStep `json:"failed_step"`
	SubmittedAt *time.Time    `json:"submitted_at"`
	// FinishedAt is when its last job finished; null while it runs.
	FinishedAt *time.Time `json:"finished_at"`
}

// WorkflowCounts counts a workflow's jobs by status; Blocked counts the
// PENDING ones still waiting for a parent.
type WorkflowCounts struct {
	Pending      int64 `json:"pending"`
	Running      int64 `json:"running"`
	Retrying     int64 `json:"retrying"`
	Completed    int64 `json:"completed"`
	DeadLettered int64 `json:"dead_lettered"`
	Canceled     int64 `json:"canceled"`
	Blocked      int64 `json:"blocked"`
	Total        int64 `json:"total"`
}

// WorkflowStep is the job a workflow failed (or was canceled) at.
type WorkflowStep struct {
	ID         string     `json:"id"`
	Topic      string     `json:"topic"`
	Status     string     `json:"status"`
	FinishedAt *time.Time `json:"finished_at"`
	// Error is the last attempt's error; "" for a job canceled before it
	// failed.
	Error string `json:"error"`
}

// WorkflowList answers GET /v1/workflows, newest first.
type WorkflowList struct {
	Workflows []Workflow `json:"workflows"`
	// NextPageToken is "" on the last page. A page filtered by status
	// examines at most 1,000 workflows: it can hold fewer than the limit,
	// even none, and still have a next page.
	NextPageToken string `json:"next_page_token"`
}

// WorkflowAction answers POST /v1/workflows/{id}/cancel and …/retry: how
// many jobs the call canceled or retried, and the workflow after it.
type WorkflowAction struct {
	Jobs     int64    `json:"jobs"`
	Workflow Workflow `json:"workflow"`
}
