package jobstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// heartbeatSQL extends the leases a worker still holds. The fence is
// locked_by AND attempts: after a reap and re-claim (even by the same
// worker) the stale attempt's beat matches nothing, so a zombie can never
// push a job out of its new owner's hands. A miss is reported, not raised.
// Each answer also says whether the job's scope is quiesced, read from
// dispatch_control in the same statement. The RUNNING fence is spelled as
// in reportSQL, for the same reason: only the primary key may serve it.
const heartbeatSQL = `
WITH beats AS (
    SELECT * FROM unnest($2::uuid[], $3::int[]) WITH ORDINALITY AS b(id, attempt, ord)
), extended AS (
    UPDATE jobs AS j
    SET lease_until = now() + $4::interval
    FROM beats
    WHERE j.id = beats.id
      AND j.attempts = beats.attempt
      AND (j.status || '') = 'RUNNING'
      AND j.locked_by = $1
    RETURNING j.id, j.attempts, j.lease_until
)
SELECT beats.id, beats.attempt, extended.lease_until,
       COALESCE(cur.status = 'CANCELED' AND cur.attempts = beats.attempt, false),
       COALESCE(cur.topic, ''),
       EXISTS (SELECT 1 FROM dispatch_control dc
               WHERE dc.paused AND dc.mode = 'quiesce'
                 AND (dc.scope = '` + GlobalScope + `' OR dc.scope = cur.topic))
FROM beats
LEFT JOIN extended ON extended.id = beats.id AND extended.attempts = beats.attempt
LEFT JOIN jobs AS cur ON cur.id = beats.id
ORDER BY beats.ord`

// Heartbeat extends the lease of every attempt in refs that worker still
// holds, in one statement, and says for each whether it held.
func (s *Store) Heartbeat(ctx context.Context, worker string, refs []pulsetype.AttemptRef, leaseTTL time.Duration) ([]pulsetype.Beat, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	ids := make([][16]byte, len(refs))
	attempts := make([]int32, len(refs))
	for i, r := range refs {
		ids[i], attempts[i] = r.ID, r.Attempt
	}
	out := make([]pulsetype.Beat, 0, len(refs))
	err := s.queryPinned(ctx, heartbeatSQL, []any{worker, ids, attempts, intervalOf(leaseTTL)}, func(rows pgx.Rows) error {
		var b pulsetype.Beat
		var until *time.Time
		if err := rows.Scan(uuidDest(&b.Ref.ID), &b.Ref.Attempt, &until, &b.Canceled, &b.Topic, &b.Quiesced); err != nil {
			return err
		}
		if until != nil {
			b.LeaseHeld, b.LeaseUntil = true, *until
		}
		out = append(out, b)
		return nil
	})
	if err != nil {
		return nil, interpretError("heartbeat", err)
	}
	return out, nil
}
