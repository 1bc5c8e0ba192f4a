package jobstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// deleteFinishedSQL removes at most $3 rows of one terminal status ($1)
// that finished more than $2 ago and no earlier than $4, and answers how
// many it removed and the latest finished_at among them. The inner SELECT
// walks jobs_finished_idx (finished_at, partial on finished_at IS NOT
// NULL) oldest first from $4 and stops after LIMIT rows, so one retention
// batch is one bounded transaction at any table size; collecting the ids
// into an array makes the DELETE itself a primary-key lookup rather than a
// join the planner might turn into a scan. SKIP LOCKED lets several
// reapers prune side by side, and the outer status guard keeps the DELETE
// to finished rows of that status even if one changed after the SELECT.
//
// $4 is where the previous batch of a pass stopped (ADR-0060): the index
// entries of the rows a batch deleted stay until a vacuum removes them,
// and while a long transaction holds its snapshot no vacuum can, nor can
// a scan mark them dead. Walking from the oldest entry, each batch read
// every row the pass had deleted since the snapshot began — measured at
// 289 µs per deleted job during a soak's open snapshot, one Postgres
// backend busy the whole time and the cleaner a third of the completion
// rate behind.
const deleteFinishedSQL = `
WITH deleted AS (
    DELETE FROM jobs
    WHERE id = ANY (ARRAY(
            SELECT id FROM jobs
            WHERE finished_at < now() - $2::interval AND finished_at >= $4 AND status = $1
            ORDER BY finished_at
            LIMIT $3
            FOR UPDATE SKIP LOCKED))
      AND status = $1
    RETURNING finished_at
)
SELECT count(*), max(finished_at) FROM deleted`

// DeleteFinished deletes up to limit jobs of the terminal status that
// finished more than olderThan ago and returns how many it deleted. A count
// below limit means nothing more is due now. Live statuses are refused: the
// retention path can never touch a job that may still run.
func (s *Store) DeleteFinished(ctx context.Context, status pulsetype.Status, olderThan time.Duration, limit int) (int64, error) {
	n, _, err := s.DeleteFinishedFrom(ctx, status, olderThan, limit, time.Time{})
	return n, err
}

// DeleteFinishedFrom is DeleteFinished for the jobs that finished at from
// or later (the zero time: from the oldest), and also returns the latest
// finished_at among those it deleted (from itself when it deleted none):
// the from of the pass's next batch. A job that finished before from —
// one whose settle committed after a later-finished job's was deleted —
// is left for the next pass, which starts from the oldest.
func (s *Store) DeleteFinishedFrom(ctx context.Context, status pulsetype.Status, olderThan time.Duration, limit int, from time.Time) (int64, time.Time, error) {
	switch {
	case !status.Terminal():
		return 0, from, apierr.Invalid("status", "retention deletes only COMPLETED, CANCELED or DEAD_LETTERED jobs, not %q", status)
	case olderThan < 0:
		return 0, from, apierr.Invalid("older_than", "must not be negative, got %s", olderThan)
	case limit < 1:
		return 0, from, apierr.Invalid("limit", "must be at least 1, got %d", limit)
	}
	var n int64
	var last *time.Time
	// A batch passes the quiet window's gate first (quiet_window.go).
	err := s.queryPinnedAs(ctx, gateSQL, deleteFinishedSQL, []any{string(status), intervalOf(olderThan), limit, from},
		func(rows pgx.Rows) error { return rows.Scan(&n, &last) })
	if err != nil {
		return 0, from, interpretError("delete finished jobs", err)
	}
	if last == nil || last.Before(from) {
		return n, from, nil
	}
	return n, *last, nil
}
