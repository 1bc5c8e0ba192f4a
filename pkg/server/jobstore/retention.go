package jobstore

import (
	"context"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// deleteFinishedSQL removes at most $3 rows of one terminal status ($1)
// that finished more than $2 ago. The inner SELECT walks jobs_finished_idx
// (finished_at, partial on finished_at IS NOT NULL) oldest first and stops
// after LIMIT rows, so one retention batch is one bounded transaction at any
// table size; collecting the ids into an array makes the DELETE itself a
// primary-key lookup rather than a join the planner might turn into a scan.
// SKIP LOCKED lets several reapers prune side by side, and the outer status
// guard keeps the DELETE to finished rows of that status even if one
// changed after the SELECT.
const deleteFinishedSQL = `
DELETE FROM jobs
WHERE id = ANY (ARRAY(
        SELECT id FROM jobs
        WHERE finished_at < now() - $2::interval AND status = $1
        ORDER BY finished_at
        LIMIT $3
        FOR UPDATE SKIP LOCKED))
  AND status = $1`

// DeleteFinished deletes up to limit jobs of the terminal status that
// finished more than olderThan ago and returns how many it deleted. A count
// below limit means nothing more is due now. Live statuses are refused: the
// retention path can never touch a job that may still run.
func (s *Store) DeleteFinished(ctx context.Context, status pulsetype.Status, olderThan time.Duration, limit int) (int64, error) {
	switch {
	case !status.Terminal():
		return 0, apierr.Invalid("status", "retention deletes only COMPLETED, CANCELED or DEAD_LETTERED jobs, not %q", status)
	case olderThan < 0:
		return 0, apierr.Invalid("older_than", "must not be negative, got %s", olderThan)
	case limit < 1:
		return 0, apierr.Invalid("limit", "must be at least 1, got %d", limit)
	}
	tag, err := s.pool.Exec(ctx, deleteFinishedSQL, string(status), intervalOf(olderThan), limit)
	if err != nil {
		return 0, interpretError("delete finished jobs", err)
	}
	return tag.RowsAffected(), nil
}
