package jobstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// progressSQL records a running attempt's progress ($4, NULL: unchanged)
// and merges a JSON object into its metadata ($5, NULL: unchanged), fenced
// as a heartbeat is (status RUNNING, the attempt, locked_by): a stale or
// foreign attempt changes nothing. The schema refuses the columns'
// change anywhere but within one RUNNING attempt (jobs_guard_progress,
// migration 00004).
const progressSQL = `
UPDATE jobs
SET progress = COALESCE($4::smallint, progress),
    metadata = CASE WHEN $5::jsonb IS NULL THEN metadata
                    ELSE COALESCE(metadata, '{}'::jsonb) || $5::jsonb END
WHERE id = $2 AND attempts = $3 AND (status || '') = 'RUNNING' AND locked_by = $1
RETURNING id`

// SetProgress records what worker's attempt ref says of its progress
// (nil: unchanged; 0..100) and merges metadata (a JSON object; nil:
// unchanged) into the job's. It reports whether worker still held the
// attempt; a false changed nothing.
func (s *Store) SetProgress(ctx context.Context, worker string, ref pulsetype.AttemptRef, progress *int16, metadata []byte) (bool, error) {
	var meta *string
	if metadata != nil {
		m := string(metadata)
		meta = &m
	}
	var id [16]byte
	err := s.pool.QueryRow(ctx, progressSQL, worker, ref.ID, ref.Attempt, progress, meta).Scan(&id)
	switch {
	case err == pgx.ErrNoRows: //nolint:errorlint // pgx returns the sentinel itself
		return false, nil
	case err != nil:
		return false, interpretError("set progress", err)
	}
	return true, nil
}
