package jobstore

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// SettledChannel is the NOTIFY channel that announces finished jobs
// (COMPLETED, DEAD_LETTERED, CANCELED); the payload is their ids, comma
// separated, at most 200 per notification. The report, the reap, cancel
// and bulk cancel send on it (notifySettledSQL), only while some process
// is registered in settle_listeners (migration 00002).
const SettledChannel = "pulse_jobs_settled"

// RegisterSettleListener records that process has waiters until ttl from
// now, so settling statements notify SettledChannel. A process refreshes
// it while it has waiters; a row past its time is ignored and pruned.
func (s *Store) RegisterSettleListener(ctx context.Context, process string, ttl time.Duration) error {
	_, err := s.pool.Exec(ctx, `
INSERT INTO settle_listeners (process, until) VALUES ($1, now() + $2::bigint * interval '1 microsecond')
ON CONFLICT (process) DO UPDATE SET until = EXCLUDED.until`, process, ttl.Microseconds())
	if err != nil {
		return interpretError("register settle listener", err)
	}
	return nil
}

// UnregisterSettleListener removes process's row, and every row whose time
// has passed (a process that died without removing its own).
func (s *Store) UnregisterSettleListener(ctx context.Context, process string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM settle_listeners WHERE process = $1 OR until < now()`, process)
	if err != nil {
		return interpretError("unregister settle listener", err)
	}
	return nil
}

// Finished returns those of ids whose jobs are finished (COMPLETED,
// DEAD_LETTERED or CANCELED) or gone: one statement for any number of
// waiters, read when notifications may have been lost.
func (s *Store) Finished(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `
SELECT w.id FROM unnest($1::uuid[]) AS w(id)
WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = ANY (ARRAY[w.id]) AND j.status IN ('PENDING', 'RUNNING', 'RETRYING'))`, uuidArray(ids))
	if err != nil {
		return nil, interpretError("read finished jobs", err)
	}
	defer rows.Close()
	var out []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(uuidDest(&id)); err != nil {
			return nil, interpretError("read finished jobs", err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("read finished jobs", err)
	}
	return out, nil
}
