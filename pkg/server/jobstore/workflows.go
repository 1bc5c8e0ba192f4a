package jobstore

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// The workflow view (ADR-0052): a workflow is the jobs one SubmitJobs call
// submitted with dependencies between them (jobs.workflow_id, the id of
// its first job). Its status is derived from its jobs on every read and
// stored nowhere: a settle writes no workflow row, so a 10,000-job
// fan-out's settles never queue on one.

// WorkflowStatus is a workflow's state, derived from its jobs.
type WorkflowStatus string

// The workflow statuses: running while any job is PENDING, RUNNING or
// RETRYING; then failed if any job was dead-lettered, canceled if any was
// canceled, done when every job completed.
const (
	WorkflowRunning  WorkflowStatus = "running"
	WorkflowFailed   WorkflowStatus = "failed"
	WorkflowCanceled WorkflowStatus = "canceled"
	WorkflowDone     WorkflowStatus = "done"
)

// WorkflowStatuses lists every status, in the order the docs give them.
var WorkflowStatuses = []WorkflowStatus{WorkflowRunning, WorkflowFailed, WorkflowCanceled, WorkflowDone}

// ParseWorkflowStatus reads a status as the API spells it ("" is none).
func ParseWorkflowStatus(field, s string) (WorkflowStatus, error) {
	if s == "" {
		return "", nil
	}
	for _, w := range WorkflowStatuses {
		if string(w) == s {
			return w, nil
		}
	}
	return "", apierr.Invalid(field, "is %q; one of running, failed, canceled, done", s)
}

// WorkflowCounts counts a workflow's jobs by status; Blocked counts the
// PENDING ones still waiting for a parent (blocked_by > 0).
type WorkflowCounts struct {
	Pending, Running, Retrying, Completed, DeadLettered, Canceled, Blocked int64
}

// Total is how many jobs the workflow has.
func (c WorkflowCounts) Total() int64 {
	return c.Pending + c.Running + c.Retrying + c.Completed + c.DeadLettered + c.Canceled
}

// WorkflowStep is one job of a workflow, as its status names it: the
// step it failed (or was canceled) at.
type WorkflowStep struct {
	ID         uuid.UUID
	Topic      string
	Status     pulsetype.Status
	FinishedAt *time.Time
	// Error is the last attempt's error ("" for a job canceled before it
	// failed).
	Error string
}

// Workflow is a workflow's status and its jobs' counts.
type Workflow struct {
	ID     uuid.UUID
	Status WorkflowStatus
	// Topic is the topic of the workflow's first job ("" once retention
	// deleted it).
	Topic  string
	Counts WorkflowCounts
	// FailedStep is the first job (by finished_at, then id) that was
	// dead-lettered, or when none was, the first that was canceled; nil
	// while every finished job completed. A running workflow can have one
	// (another branch still runs).
	FailedStep  *WorkflowStep
	SubmittedAt time.Time
	// FinishedAt is when its last job finished, once none is live.
	FinishedAt *time.Time
}

// workflowCountsSQL counts a workflow's jobs in one walk of
// jobs_workflow_status_idx's entries for it.
const workflowCountsSQL = `
SELECT count(*) FILTER (WHERE status = 'PENDING'),
       count(*) FILTER (WHERE status = 'RUNNING'),
       count(*) FILTER (WHERE status = 'RETRYING'),
       count(*) FILTER (WHERE status = 'COMPLETED'),
       count(*) FILTER (WHERE status = 'DEAD_LETTERED'),
       count(*) FILTER (WHERE status = 'CANCELED'),
       count(*) FILTER (WHERE status = 'PENDING' AND blocked_by > 0),
       min(submitted_at), max(finished_at),
       (SELECT topic FROM jobs WHERE id = $1)
FROM jobs
WHERE workflow_id = $1`

// workflowStepSQL is the workflow's first job in status $2: the first
// entry of one range of jobs_workflow_status_idx.
const workflowStepSQL = `
SELECT id, topic, status, finished_at, COALESCE(errors -> -1 ->> 'error', '')
FROM jobs
WHERE workflow_id = $1 AND status = $2
ORDER BY finished_at, id
LIMIT 1`

// GetWorkflow reads a workflow's status. A workflow none of whose jobs
// exist (never submitted, or all deleted by retention) is NotFound.
func (s *Store) GetWorkflow(ctx context.Context, id uuid.UUID) (*Workflow, error) {
	const op = "get workflow"
	w := &Workflow{ID: id}
	c := &w.Counts
	var submitted *time.Time
	var topic *string
	err := s.pool.QueryRow(ctx, workflowCountsSQL, id).Scan(&c.Pending, &c.Running, &c.Retrying, &c.Completed,
		&c.DeadLettered, &c.Canceled, &c.Blocked, &submitted, &w.FinishedAt, &topic)
	if err != nil {
		return nil, interpretError(op, err)
	}
	if c.Total() == 0 || submitted == nil {
		return nil, apierr.NotFound("workflow", id.String())
	}
	w.SubmittedAt = *submitted
	if topic != nil {
		w.Topic = *topic
	}
	live := c.Pending + c.Running + c.Retrying
	switch {
	case live > 0:
		w.Status, w.FinishedAt = WorkflowRunning, nil
	case c.DeadLettered > 0:
		w.Status = WorkflowFailed
	case c.Canceled > 0:
		w.Status = WorkflowCanceled
	default:
		w.Status = WorkflowDone
	}
	for _, st := range []pulsetype.Status{pulsetype.StatusDeadLettered, pulsetype.StatusCanceled} {
		if (st == pulsetype.StatusDeadLettered && c.DeadLettered == 0) || (st == pulsetype.StatusCanceled && c.Canceled == 0) {
			continue
		}
		var step WorkflowStep
		var status string
		err := s.pool.QueryRow(ctx, workflowStepSQL, id, string(st)).Scan(&step.ID, &step.Topic, &status, &step.FinishedAt, &step.Error)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // it was retried since the counts were read
		}
		if err != nil {
			return nil, interpretError(op, err)
		}
		step.Status = pulsetype.Status(status)
		w.FailedStep = &step
		break
	}
	return w, nil
}

// WorkflowFilter selects workflows for ListWorkflows.
type WorkflowFilter struct {
	// Status keeps the workflows in it; "" keeps all.
	Status WorkflowStatus
	// Before pages: only workflows whose id is below it (newest first).
	Before *uuid.UUID
	Limit  int
	// Window bounds how many workflows one page examines when Status
	// filters (0: WorkflowWindowDefault): a rare status costs a page at
	// most Window workflows, and the page says where the next one starts.
	Window int
}

// WorkflowWindowDefault is how many workflows a filtered page examines.
const WorkflowWindowDefault = 1000

// WorkflowSummary is a workflow as the list shows it: its status without
// counts (those are GetWorkflow's).
type WorkflowSummary struct {
	ID          uuid.UUID
	Topic       string
	Status      WorkflowStatus
	SubmittedAt time.Time
}

// WorkflowPage is one page of ListWorkflows: Next, when not nil, is where
// the next page starts (Before), also after a page the window left short.
type WorkflowPage struct {
	Workflows []WorkflowSummary
	Next      *uuid.UUID
}

// listWorkflowsSQL walks jobs_workflow_roots_idx newest first from $1 (a
// nil uuid: the start) for at most $2 workflows, derives each one's status
// from three probes of jobs_workflow_status_idx, and keeps at most $4 of
// status $3 (the empty string keeps all). The last row carries how many workflows the
// walk examined and the last one's id.
const listWorkflowsSQL = `
WITH walk AS MATERIALIZED (
    SELECT r.id, r.topic, r.submitted_at
    FROM jobs AS r
    WHERE r.workflow_id IS NOT DISTINCT FROM r.id AND ($1::uuid IS NULL OR r.id < $1)
    ORDER BY r.id DESC
    LIMIT $2
), derived AS MATERIALIZED (
    SELECT w.id, w.topic, w.submitted_at,
           CASE WHEN EXISTS (SELECT 1 FROM jobs AS j WHERE j.workflow_id = w.id AND j.status IN ('PENDING', 'RUNNING', 'RETRYING')) THEN 'running'
                WHEN EXISTS (SELECT 1 FROM jobs AS j WHERE j.workflow_id = w.id AND j.status = 'DEAD_LETTERED') THEN 'failed'
                WHEN EXISTS (SELECT 1 FROM jobs AS j WHERE j.workflow_id = w.id AND j.status = 'CANCELED') THEN 'canceled'
                ELSE 'done' END AS status
    FROM walk AS w
)
SELECT d.id, d.topic, d.submitted_at, d.status,
       (SELECT count(*) FROM walk), (SELECT id FROM walk ORDER BY id LIMIT 1)
FROM derived AS d
WHERE $3 = '' OR d.status = $3
ORDER BY d.id DESC
LIMIT $4`

// ListWorkflows lists workflows newest first (by their first job's id, a
// uuid v7), keyset-paged by Before.
func (s *Store) ListWorkflows(ctx context.Context, f WorkflowFilter) (WorkflowPage, error) {
	if f.Limit <= 0 {
		return WorkflowPage{}, nil
	}
	walk := f.Limit + 1
	if f.Status != "" {
		walk = f.Window
		if walk <= 0 {
			walk = WorkflowWindowDefault
		}
		walk = max(walk, f.Limit+1)
	}
	rows, err := s.pool.Query(ctx, listWorkflowsSQL, f.Before, walk, string(f.Status), f.Limit+1)
	if err != nil {
		return WorkflowPage{}, interpretError("list workflows", err)
	}
	var page WorkflowPage
	var examined int64
	var last *uuid.UUID
	for rows.Next() {
		var w WorkflowSummary
		var status string
		if err := rows.Scan(&w.ID, &w.Topic, &w.SubmittedAt, &status, &examined, &last); err != nil {
			rows.Close()
			return WorkflowPage{}, interpretError("list workflows", err)
		}
		w.Status = WorkflowStatus(status)
		page.Workflows = append(page.Workflows, w)
	}
	if err := rows.Err(); err != nil {
		return WorkflowPage{}, interpretError("list workflows", err)
	}
	switch {
	case len(page.Workflows) > f.Limit:
		page.Workflows = page.Workflows[:f.Limit]
		next := page.Workflows[f.Limit-1].ID
		page.Next = &next
	case f.Status != "" && int(examined) >= walk:
		// The window ended before the page filled: resume after it.
		page.Next = last
	case f.Status != "" && len(page.Workflows) == 0:
		// Nothing matched: the walk's size is not on any row; ask once.
		var n int64
		var lowest *uuid.UUID
		err := s.pool.QueryRow(ctx, `WITH w AS (SELECT id FROM jobs AS r
			WHERE r.workflow_id IS NOT DISTINCT FROM r.id AND ($1::uuid IS NULL OR r.id < $1) ORDER BY r.id DESC LIMIT $2)
			SELECT (SELECT count(*) FROM w), (SELECT id FROM w ORDER BY id LIMIT 1)`,
			f.Before, walk).Scan(&n, &lowest)
		if err != nil {
			return WorkflowPage{}, interpretError("list workflows", err)
		}
		if int(n) >= walk {
			page.Next = lowest
		}
	}
	return page, nil
}

// WorkflowJob is one job of a workflow's graph.
type WorkflowJob struct {
	ID     uuid.UUID
	Topic  string
	Status pulsetype.Status
	// Blocked is true for a PENDING job still waiting for a parent.
	Blocked bool
}

// WorkflowEdge is one dependency of a workflow's graph.
type WorkflowEdge struct {
	Parent, Child uuid.UUID
	// OnParentFailure is the edge's policy: "cancel" or "run".
	OnParentFailure string
}

// WorkflowGraph is a workflow's jobs and edges, read up to a bound.
type WorkflowGraph struct {
	Jobs  []WorkflowJob
	Edges []WorkflowEdge
	// Truncated says the workflow has more than the bound of jobs (or
	// edges): Jobs and Edges hold the first ones by id.
	Truncated bool
}

// WorkflowGraph reads a workflow's jobs (at most maxJobs, by id) and the
// edges into them (at most maxEdges). It is what the dashboard draws; its
// cost is bounded by the bounds, not by the workflow.
func (s *Store) WorkflowGraph(ctx context.Context, id uuid.UUID, maxJobs, maxEdges int) (WorkflowGraph, error) {
	const op = "read workflow graph"
	var g WorkflowGraph
	rows, err := s.pool.Query(ctx, `SELECT id, topic, status, blocked_by > 0 FROM jobs
		WHERE workflow_id = $1 ORDER BY id LIMIT $2`, id, maxJobs+1)
	if err != nil {
		return g, interpretError(op, err)
	}
	for rows.Next() {
		var j WorkflowJob
		var status string
		if err := rows.Scan(&j.ID, &j.Topic, &status, &j.Blocked); err != nil {
			rows.Close()
			return g, interpretError(op, err)
		}
		j.Status = pulsetype.Status(status)
		g.Jobs = append(g.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return g, interpretError(op, err)
	}
	if len(g.Jobs) == 0 {
		return g, apierr.NotFound("workflow", id.String())
	}
	if len(g.Jobs) > maxJobs {
		g.Jobs, g.Truncated = g.Jobs[:maxJobs], true
	}
	rows, err = s.pool.Query(ctx, `SELECT d.parent_id, d.child_id, d.on_parent_failure
		FROM jobs AS j JOIN job_dependencies AS d ON d.child_id = j.id
		WHERE j.workflow_id = $1 LIMIT $2`, id, maxEdges+1)
	if err != nil {
		return g, interpretError(op, err)
	}
	for rows.Next() {
		var e WorkflowEdge
		if err := rows.Scan(&e.Parent, &e.Child, &e.OnParentFailure); err != nil {
			rows.Close()
			return g, interpretError(op, err)
		}
		g.Edges = append(g.Edges, e)
	}
	if err := rows.Err(); err != nil {
		return g, interpretError(op, err)
	}
	if len(g.Edges) > maxEdges {
		g.Edges, g.Truncated = g.Edges[:maxEdges], true
	}
	return g, nil
}

// cancelWorkflowSQL cancels a workflow's live jobs in one statement: they
// are locked in id order first (the order dependency writes lock in), the
// running ones' late reports no longer match, their waiters are woken,
// and each canceled parent's release trigger finds its children already
// CANCELED.
const cancelWorkflowSQL = `
WITH locked AS (
    SELECT id FROM jobs
    WHERE workflow_id = $1 AND status IN ('PENDING', 'RETRYING', 'RUNNING')
    ORDER BY id
    FOR UPDATE
), settled AS (
    UPDATE jobs AS j
    SET status = 'CANCELED', finished_at = GREATEST(now(), j.submitted_at), lease_until = NULL
    FROM locked
    WHERE j.id = ANY (ARRAY[locked.id]) AND j.status IN ('PENDING', 'RETRYING', 'RUNNING')
    RETURNING j.id, j.status
), ` + notifySettledSQL + `
SELECT (SELECT count(*) FROM settled), (SELECT count(*) FROM notified)`

// retryWorkflowSQL retries a workflow's dead-lettered and canceled jobs in
// one statement, as the single retry does (a fresh attempt budget,
// claimable now, the history kept). The schema's triggers restore each
// retried job's blocked_by from its parents' statuses after the
// statement (jobs_recount_blocked) and re-block the PENDING children of
// each retried parent (jobs_release_dependents), so a retried step runs
// only after the parents it still waits for; the topics are NOTIFYed for
// the ones free to run.
const retryWorkflowSQL = `
WITH locked AS (
    SELECT id FROM jobs
    WHERE workflow_id = $1 AND status IN ('DEAD_LETTERED', 'CANCELED')
    ORDER BY id
    FOR UPDATE
), retried AS (
    UPDATE jobs AS j
    SET status = 'PENDING', attempts = 0, snoozes = 0, finished_at = NULL,
        lease_until = NULL, next_run_at = now()
    FROM locked
    WHERE j.id = ANY (ARRAY[locked.id]) AND j.status IN ('DEAD_LETTERED', 'CANCELED')
    RETURNING j.topic
), notified AS (
    SELECT pg_notify('` + ReadyChannel + `', t.topic) FROM (SELECT DISTINCT topic FROM retried) AS t
)
SELECT (SELECT count(*) FROM retried), (SELECT count(*) FROM notified)`

// CancelWorkflow cancels every live job of a workflow in one statement
// and returns how many it canceled and the workflow after. A workflow
// with no live job is refused (InvalidTransition, naming its status).
func (s *Store) CancelWorkflow(ctx context.Context, id uuid.UUID) (int64, *Workflow, error) {
	return s.workflowAction(ctx, "cancel workflow", cancelWorkflowSQL, id,
		"cannot cancel workflow %s: it is %s (only a running workflow has jobs to cancel)")
}

// RetryWorkflow retries every dead-lettered and canceled job of a
// workflow in one statement (retry from the failed step) and returns how
// many it retried and the workflow after. A workflow with none is
// refused (InvalidTransition).
func (s *Store) RetryWorkflow(ctx context.Context, id uuid.UUID) (int64, *Workflow, error) {
	return s.workflowAction(ctx, "retry workflow", retryWorkflowSQL, id,
		"cannot retry workflow %s: it is %s and has no dead-lettered or canceled job")
}

// workflowActionTries is how many times a workflow's cancel or retry runs
// when Postgres aborts it to break a deadlock: its statement locks the
// workflow's jobs in id order, but a concurrent settle's release trigger
// locks a parent's children in its own order, so the two can deadlock;
// the aborted statement rolled back whole, and running it again is safe.
const workflowActionTries = 3

// deadlockDetected is Postgres's SQLSTATE for a statement aborted to
// break a deadlock.
const deadlockDetected = "40P01"

func (s *Store) workflowAction(ctx context.Context, op, stmt string, id uuid.UUID, refusal string) (int64, *Workflow, error) {
	var n, notified int64
	var err error
	for range workflowActionTries {
		err = s.pool.QueryRow(ctx, stmt, id).Scan(&n, &notified)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != deadlockDetected {
			break
		}
	}
	if err != nil {
		return 0, nil, interpretError(op, err)
	}
	w, err := s.GetWorkflow(ctx, id)
	if err != nil {
		return n, nil, err
	}
	if n == 0 {
		return 0, w, apierr.InvalidTransition(refusal, id, w.Status)
	}
	return n, w, nil
}
