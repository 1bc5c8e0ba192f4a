package jobstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/google/uuid"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// cancelSQL ends a live job. A running attempt learns it on its next
// heartbeat; its late report no longer matches status RUNNING. finished_at
// is never before submitted_at (jobs_timestamps_ordered), even for a job
// whose insert committed after this statement's clock was read. Its
// waiters are woken (notifySettledSQL).
const cancelSQL = `
WITH settled AS (
    UPDATE jobs
    SET status = 'CANCELED', finished_at = GREATEST(now(), submitted_at), lease_until = NULL
    WHERE id = ? AND status IN ('PENDING', 'RETRYING', 'RUNNING')
    RETURNING *
), ` + notifySettledSQL + `
SELECT ` // + jobReturning FROM settled, ...

// retrySQL gives a dead-lettered or canceled job a fresh attempt budget and
// makes it claimable now. The error history stays, and so does locked_by
// (the worker of the last attempt): the schema lets it change only in a
// claim (migration 00005). The NOTIFY wakes the gateways as an insert would.
const retrySQL = `
WITH retried AS (
    UPDATE jobs
    SET status = 'PENDING', attempts = 0, snoozes = 0, finished_at = NULL,
        lease_until = NULL, next_run_at = now()
    WHERE id = ? AND status IN ('DEAD_LETTERED', 'CANCELED')
    RETURNING *
), notified AS (
    SELECT pg_notify('` + ReadyChannel + `', topic) FROM retried
)
SELECT ` // + jobReturning FROM retried, ...

// Cancel moves a PENDING, RETRYING or RUNNING job to CANCELED.
func (s *Store) Cancel(ctx context.Context, id uuid.UUID) (*Job, error) {
	return s.guarded(ctx, "cancel job", cancelSQL+jobReturning+` FROM settled, (SELECT count(*) FROM notified) AS n`,
		id, "cannot cancel job %s: it is %s")
}

// Retry moves a DEAD_LETTERED or CANCELED job back to PENDING.
func (s *Store) Retry(ctx context.Context, id uuid.UUID) (*Job, error) {
	return s.guarded(ctx, "retry job", retrySQL+jobReturning+` FROM retried, (SELECT count(*) FROM notified) AS n`,
		id, "cannot retry job %s: it is %s (only DEAD_LETTERED or CANCELED jobs can be retried)")
}

// guarded runs a single-row guarded UPDATE (on the read side: operator
// actions, not the hot path) that returns the job; zero rows becomes
// NotFound or an invalid-transition error naming the job's actual status.
func (s *Store) guarded(ctx context.Context, op, query string, id uuid.UUID, refusal string) (*Job, error) {
	var row jobRow
	err := s.reads().NewRaw(query, id).Scan(ctx, &row)
	if err == nil {
		return row.job(), nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, readError(op, err)
	}
	cur, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return nil, apierr.InvalidTransition(refusal, id, cur.Status)
}
