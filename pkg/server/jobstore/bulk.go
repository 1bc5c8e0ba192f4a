package jobstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Operator actions on every job a filter matches (ADR-0019): cancel live
// jobs, delete finished ones. Each runs as a walk over the primary key in
// batches, one statement and one short transaction per batch, so a filter
// matching a million jobs never holds one giant transaction, its locks or
// its WAL: a batch that committed stays done if a later one fails or the
// caller goes away. The schema's guards still judge every row: a delete
// that reached a live job would be refused by jobs_guard_delete.

// BulkBatchDefault is how many jobs one batch statement acts on.
const BulkBatchDefault = 1000

// BulkFilter selects the jobs a bulk action acts on. Zero fields do not
// filter; the action's own statuses always do.
type BulkFilter struct {
	Topic string
	// Status narrows the action to one of its statuses.
	Status pulsetype.Status
	// Args, a JSON object, keeps the jobs whose args contain it (jsonb
	// @>). The caller validates it (jobspec.ValidateArgsFilter).
	Args []byte
}

// BulkResult is what a bulk action did.
type BulkResult struct {
	// Affected is how many jobs it canceled or deleted.
	Affected int64
	// Batches is how many batch statements ran.
	Batches int
}

// Statuses a bulk action may act on.
var (
	cancelableStatuses = []pulsetype.Status{pulsetype.StatusPending, pulsetype.StatusRetrying, pulsetype.StatusRunning}
	deletableStatuses  = []pulsetype.Status{pulsetype.StatusCompleted, pulsetype.StatusDeadLettered, pulsetype.StatusCanceled}
)

// bulkCancelSQL cancels the next batch of matching jobs after the cursor
// ($1), submitted before the action began ($2): new jobs do not keep the
// walk going. The batch's rows are locked in the CTE with SKIP LOCKED, so
// the action never waits on (or deadlocks with) a claim, report or reap
// holding a row at that instant; such a row is left as it is, and
// CountMatching afterwards tells the caller it still matches. The UPDATE
// repeats the status guard of the single cancel (cancelSQL). It answers
// the jobs canceled, the rows the batch examined and the last id it
// examined (the next cursor), and wakes the canceled jobs' waiters
// (notifySettledSQL; the final WHERE makes it run).
const bulkCancelSQL = bulkPickSQL + `, settled AS (
    UPDATE jobs j
    SET status = 'CANCELED', finished_at = GREATEST(now(), j.submitted_at), lease_until = NULL
    FROM picked
    WHERE j.id = ANY (ARRAY[picked.id]) AND j.status IN ('PENDING', 'RETRYING', 'RUNNING')
    RETURNING j.id, j.status
), done AS (SELECT id FROM settled), ` + notifySettledSQL + bulkTallySQL + `
WHERE (SELECT count(*) FROM notified) >= 0`

// bulkDeleteSQL deletes the next batch of matching finished jobs, as
// bulkCancelSQL walks them. The status guard keeps the DELETE to finished
// rows; the schema's jobs_delete_terminal_only is the backstop.
const bulkDeleteSQL = bulkPickSQL + `, done AS (
    DELETE FROM jobs j
    USING picked
    WHERE j.id = ANY (ARRAY[picked.id]) AND j.status IN ('COMPLETED', 'DEAD_LETTERED', 'CANCELED')
    RETURNING j.id
)` + bulkTallySQL

// bulkPickSQL locks the next batch of matching jobs after the cursor ($1),
// submitted before the action began ($2), at most $3, skipping rows
// locked elsewhere; %s is the filter. The action's CTE done follows it.
const bulkPickSQL = `
WITH picked AS (
    SELECT id FROM jobs
    WHERE id > $1 AND submitted_at <= $2 AND %s
    ORDER BY id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)`

// bulkTallySQL answers a batch's jobs acted on, rows examined and last id
// examined (the next cursor).
const bulkTallySQL = `
SELECT (SELECT count(*) FROM done), (SELECT count(*) FROM picked),
       (SELECT id FROM picked ORDER BY id DESC LIMIT 1)`

// BulkAction names what a bulk statement does, for its filter's statuses.
type BulkAction string

// The bulk actions.
const (
	BulkCancel BulkAction = "cancel"
	BulkDelete BulkAction = "delete"
)

// statuses are the action's statuses narrowed by f.Status, or an error
// naming the status when the action cannot act on it.
func (a BulkAction) statuses(f BulkFilter) ([]pulsetype.Status, error) {
	all, what := cancelableStatuses, "cancel acts only on PENDING, RETRYING or RUNNING jobs"
	if a == BulkDelete {
		all, what = deletableStatuses, "delete acts only on finished jobs: COMPLETED, DEAD_LETTERED or CANCELED"
	}
	if f.Status == "" {
		return all, nil
	}
	for _, s := range all {
		if s == f.Status {
			return []pulsetype.Status{s}, nil
		}
	}
	return nil, apierr.Invalid("status", "is %s; %s", f.Status, what)
}

// where renders f for the action as SQL after the placeholders already
// taken (first is the next one's number), and its arguments.
func (f BulkFilter) where(statuses []pulsetype.Status, first int) (string, []any) {
	names := make([]string, len(statuses))
	for i, s := range statuses {
		names[i] = string(s)
	}
	args := []any{names}
	conds := []string{fmt.Sprintf("status = ANY ($%d::text[])", first)}
	if f.Topic != "" {
		args = append(args, f.Topic)
		conds = append(conds, fmt.Sprintf("topic = $%d", first+len(args)-1))
	}
	if f.Args != nil {
		args = append(args, string(f.Args))
		conds = append(conds, fmt.Sprintf("args @> $%d::jsonb", first+len(args)-1))
	}
	return strings.Join(conds, " AND "), args
}

// CountMatching counts the jobs action would act on now.
func (s *Store) CountMatching(ctx context.Context, action BulkAction, f BulkFilter) (int64, error) {
	statuses, err := action.statuses(f)
	if err != nil {
		return 0, err
	}
	cond, args := f.where(statuses, 1)
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE `+cond, args...).Scan(&n); err != nil {
		return 0, interpretError("count matching jobs", err)
	}
	return n, nil
}

// CancelMatching cancels every live job f matches, batch jobs per
// statement (0: BulkBatchDefault).
func (s *Store) CancelMatching(ctx context.Context, f BulkFilter, batch int) (BulkResult, error) {
	return s.bulk(ctx, BulkCancel, bulkCancelSQL, f, batch)
}

// DeleteMatching deletes every finished job f matches, batch jobs per
// statement (0: BulkBatchDefault). A live status in f is refused.
func (s *Store) DeleteMatching(ctx context.Context, f BulkFilter, batch int) (BulkResult, error) {
	return s.bulk(ctx, BulkDelete, bulkDeleteSQL, f, batch)
}

// bulk walks the primary key from the start, one batch statement at a
// time, until a batch finds nothing more after its cursor. (A batch
// finding fewer rows than its limit is not the end: the rows it skipped
// as locked did not count.)
func (s *Store) bulk(ctx context.Context, action BulkAction, stmt string, f BulkFilter, batch int) (BulkResult, error) {
	if batch <= 0 {
		batch = BulkBatchDefault
	}
	statuses, err := action.statuses(f)
	if err != nil {
		return BulkResult{}, err
	}
	op := string(action) + " matching jobs"
	var began time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&began); err != nil {
		return BulkResult{}, interpretError(op, err)
	}
	cond, condArgs := f.where(statuses, 4)
	query := fmt.Sprintf(stmt, cond)
	var res BulkResult
	cursor := uuid.Nil
	for {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("%s: stopped after %d job(s): %w", op, res.Affected, err)
		}
		var affected, examined int64
		var last *uuid.UUID
		args := append([]any{cursor, began, batch}, condArgs...)
		if err := s.pool.QueryRow(ctx, query, args...).Scan(&affected, &examined, &last); err != nil {
			return res, interpretError(op, err)
		}
		res.Batches++
		res.Affected += affected
		if examined == 0 || last == nil {
			return res, nil
		}
		cursor = *last
	}
}
