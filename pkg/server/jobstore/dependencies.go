package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// graphInsertSQL is insertSQL with each job's workflow id (one more
// array parameter after insertParams', NULL: none), for a submit with
// dependencies (InsertGraph).
var graphInsertSQL = strings.TrimSuffix(insertInto, ")") + ", workflow_id)" + insertValues + `, w.wf
FROM ` + arraySource + `
CROSS JOIN LATERAL (SELECT (` + fmt.Sprintf("$%d", len(insertParams(nil))+1) + `::uuid[])[t.ord] AS wf) AS w
ON CONFLICT DO NOTHING
RETURNING id`

// existingJobsSQL finds which of the ids name a job.
const existingJobsSQL = `SELECT id FROM jobs WHERE id = ANY($1::uuid[])`

// insertEdgesSQL writes a graph's edges in one statement; the schema's
// statement trigger (job_dependencies_added, migration 00010) locks the
// jobs they name, counts each child's unfinished parents into blocked_by
// and cancels a child whose parent already failed, by its policy.
const insertEdgesSQL = `
INSERT INTO job_dependencies (parent_id, child_id, on_parent_failure)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[])`

// InsertGraph writes jobs with dependencies (NewJob.DependsOn, ADR-0047)
// and their edges in one transaction: all of it or nothing. A parent is a
// job of the same call (by its NewJob.ID) or an existing job; the caller
// has checked that the graph has no cycle (package jobgraph). A parent id
// that names no job is refused as jobs[i].depends_on[k] (a *MemberError
// naming depends_on[k]), before anything is written.
//
// A job whose id or live idempotency key exists already is a duplicate,
// as with Insert: it is not written again, its edges are the ones it was
// submitted with, and an edge from it to a new child names the existing
// job. Unique jobs (UniqueFor) are not part of a graph.
func (s *Store) InsertGraph(ctx context.Context, jobs []pulsetype.NewJob) ([]pulsetype.Inserted, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	inCall := make(map[uuid.UUID]int, len(jobs))
	for i := range jobs {
		if jobs[i].UniqueFor > 0 {
			return nil, &MemberError{Index: i, Err: apierr.Invalid("unique_for", "a job with dependencies or dependents cannot be unique")}
		}
		if jobs[i].ReplaceKey != "" {
			return nil, &MemberError{Index: i, Err: apierr.Invalid("replace_key", "a job with dependencies or dependents cannot replace a pending job")}
		}
		inCall[jobs[i].ID] = i
	}
	var outside []uuid.UUID
	for i := range jobs {
		for _, d := range jobs[i].DependsOn {
			if _, ok := inCall[d.Parent]; !ok {
				outside = append(outside, d.Parent)
			}
		}
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, interpretError("insert jobs", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	if len(outside) > 0 {
		found, err := idSet(ctx, tx, existingJobsSQL, uuidArray(outside))
		if err != nil {
			return nil, interpretError("insert jobs", err)
		}
		for i := range jobs {
			for k, d := range jobs[i].DependsOn {
				if _, ok := inCall[d.Parent]; !ok && !found[d.Parent] {
					return nil, &MemberError{Index: i, Err: apierr.Invalid(fmt.Sprintf("depends_on[%d]", k),
						"job %s does not exist (a parent is an existing job's id, or \"$n\" for the n-th job of the call)", d.Parent)}
				}
			}
		}
	}

	params := insertParams(jobs)
	wfs := make([]*uuid.UUID, len(jobs))
	for i := range jobs {
		if jobs[i].WorkflowID != uuid.Nil {
			wf := jobs[i].WorkflowID
			wfs[i] = &wf
		}
	}
	params = append(params, wfs)
	inserted, err := idSet(ctx, tx, graphInsertSQL, params...)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, s.refusal(ctx, jobs, err)
	}

	out := make([]pulsetype.Inserted, len(jobs))
	var keys []string
	for i := range jobs {
		out[i] = pulsetype.Inserted{ID: jobs[i].ID, Duplicate: !inserted[jobs[i].ID]}
		if out[i].Duplicate && jobs[i].IdempotencyKey != "" {
			keys = append(keys, jobs[i].IdempotencyKey)
		}
	}
	if len(keys) > 0 {
		holders, err := keyHoldersIn(ctx, tx, keys)
		if err != nil {
			return nil, interpretError("insert jobs", err)
		}
		for i := range jobs {
			if !out[i].Duplicate || jobs[i].IdempotencyKey == "" {
				continue
			}
			id, ok := holders[jobs[i].IdempotencyKey]
			if !ok {
				// The holder finished after our insert's snapshot: the
				// caller retries the call, which then inserts this job.
				return nil, apierr.Unavailable("insert jobs: a job holding an idempotency key of this graph finished during the submit; retry", nil)
			}
			out[i].ID = id
		}
	}

	var parents, children []uuid.UUID
	var policies []string
	for i := range jobs {
		if out[i].Duplicate {
			continue
		}
		for _, d := range jobs[i].DependsOn {
			parent := d.Parent
			if at, ok := inCall[parent]; ok {
				parent = out[at].ID
			}
			policy := d.OnParentFailure
			if policy == "" {
				policy = pulsetype.OnParentFailureCancel
			}
			parents, children, policies = append(parents, parent), append(children, jobs[i].ID), append(policies, string(policy))
		}
	}
	if len(parents) > 0 {
		if _, err := tx.Exec(ctx, insertEdgesSQL, uuidArray(parents), uuidArray(children), policies); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23503" {
				return nil, withCause(apierr.Invalid("depends_on", "a parent of this graph was deleted during the submit"), pgErr)
			}
			return nil, interpretError("insert dependencies", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, interpretError("insert jobs", err)
	}
	return out, nil
}

// idSet runs a statement whose first column is a job id and collects the ids.
func idSet(ctx context.Context, tx pgx.Tx, sql string, args ...any) (map[uuid.UUID]bool, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[uuid.UUID]bool)
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(uuidDest(&id)); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// keyHoldersIn is keyHolders inside tx.
func keyHoldersIn(ctx context.Context, tx pgx.Tx, keys []string) (map[string]uuid.UUID, error) {
	rows, err := tx.Query(ctx, existingByKeySQL, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]uuid.UUID, len(keys))
	for rows.Next() {
		var key string
		var id uuid.UUID
		if err := rows.Scan(&key, uuidDest(&id)); err != nil {
			return nil, err
		}
		out[key] = id
	}
	return out, rows.Err()
}

// ParentResult is one parent of a job, as its child reads it.
type ParentResult struct {
	ID         uuid.UUID
	Topic      string
	Status     pulsetype.Status
	Result     []byte // nil unless COMPLETED with a result
	FinishedAt *time.Time
}

// parentResultsSQL reads the parents of a job for the worker holding its
// running attempt, fenced as a heartbeat is (status RUNNING, the attempt,
// locked_by): a stale or foreign attempt reads nothing (ok false).
const parentResultsSQL = `
WITH holder AS (
    SELECT id FROM jobs
    WHERE id = $2 AND attempts = $3 AND (status || '') = 'RUNNING' AND locked_by = $1
)
SELECT h.id IS NOT NULL, p.id, p.topic, p.status, p.result, p.finished_at
FROM (SELECT 1) AS one
LEFT JOIN holder AS h ON true
LEFT JOIN job_dependencies AS d ON d.child_id = h.id
LEFT JOIN jobs AS p ON p.id = ANY (ARRAY[d.parent_id])
ORDER BY p.id`

// ParentResults reads the parents of the job of worker's attempt ref,
// with each parent's status and result (ADR-0047). ok is false when worker
// does not hold that running attempt; then nothing is read.
func (s *Store) ParentResults(ctx context.Context, worker string, ref pulsetype.AttemptRef) (out []ParentResult, ok bool, err error) {
	rows, err := s.pool.Query(ctx, parentResultsSQL, worker, ref.ID, ref.Attempt)
	if err != nil {
		return nil, false, interpretError("read parent results", err)
	}
	defer rows.Close()
	for rows.Next() {
		var held bool
		var id *[16]byte
		var topic, status *string
		var result []byte
		var finished *time.Time
		if err := rows.Scan(&held, &id, &topic, &status, &result, &finished); err != nil {
			return nil, false, interpretError("read parent results", err)
		}
		ok = held
		if id == nil {
			continue
		}
		out = append(out, ParentResult{ID: uuid.UUID(*id), Topic: *topic, Status: pulsetype.Status(*status), Result: result, FinishedAt: finished})
	}
	if err := rows.Err(); err != nil {
		return nil, false, interpretError("read parent results", err)
	}
	if !ok {
		return nil, false, nil
	}
	return out, true, nil
}
