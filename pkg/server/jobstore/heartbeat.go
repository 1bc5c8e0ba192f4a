package jobstore

import (
	"context"
	"fmt"
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
// in reportSQL, for the same reason: only the primary key may serve it;
// and the ids are matched as in reportSQL (= ANY (ARRAY[…])), so a probe
// of the primary key per beat is the only way to reach jobs.
//
// The statement returns two kinds of row, matched to the beats by
// Heartbeat: one per lease extended (ord 0, its new lease_until) and one
// per beat (its ord, and what the job's row said before the statement:
// canceled, topic, quiesced). Joining the extended rows back to the beats
// in SQL was a nested loop over the two, planned on a guess of one
// extended row: 140-190 ms for a worker's 1,000 running jobs.
const heartbeatSQL = `
WITH beats AS (
    SELECT * FROM unnest($2::uuid[], $3::int[]) WITH ORDINALITY AS b(id, attempt, ord)
), extended AS (
    UPDATE jobs AS j
    SET lease_until = now() + $4::interval
    FROM beats
    WHERE j.id = ANY (ARRAY[beats.id])
      AND j.attempts = beats.attempt
      AND (j.status || '') = 'RUNNING'
      AND j.locked_by = $1
    RETURNING j.id, j.attempts, j.lease_until
)
SELECT 0::bigint, id, attempts, lease_until, false, '', false FROM extended
UNION ALL
SELECT beats.ord, beats.id, beats.attempt, NULL::timestamptz,
       COALESCE(cur.status = 'CANCELED' AND cur.attempts = beats.attempt, false),
       COALESCE(cur.topic, ''),
       EXISTS (SELECT 1 FROM dispatch_control dc
               WHERE dc.paused AND dc.mode = 'quiesce'
                 AND (dc.scope = '` + GlobalScope + `' OR dc.scope = cur.topic))
FROM beats
LEFT JOIN jobs AS cur ON cur.id = ANY (ARRAY[beats.id])`

// Heartbeat extends the lease of every attempt in refs that worker still
// holds, in one statement, and says for each whether it held.
func (s *Store) Heartbeat(ctx context.Context, worker string, refs []pulsetype.AttemptRef, leaseTTL time.Duration) ([]pulsetype.Beat, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	ids := make([][16]byte, len(refs))
	attempts := make([]int32, len(refs))
	out := make([]pulsetype.Beat, len(refs))
	for i, r := range refs {
		out[i].Ref = r
	}
	// The beats go in id order (lock order, lock_order.go), so a report
	// of the same jobs cannot deadlock with them; order maps a beat's
	// place in the arrays (its ord - 1) back to its place in refs.
	order := inIDOrder(len(refs), func(i int) [16]byte { return refs[i].ID })
	for k, i := range order {
		ids[k], attempts[k] = refs[i].ID, refs[i].Attempt
	}
	held := make(map[pulsetype.AttemptRef]time.Time, len(refs))
	err := s.queryPinned(ctx, heartbeatSQL, []any{worker, ids, attempts, intervalOf(leaseTTL)}, func(rows pgx.Rows) error {
		var ord int64
		var b pulsetype.Beat
		var until *time.Time
		if err := rows.Scan(&ord, uuidDest(&b.Ref.ID), &b.Ref.Attempt, &until, &b.Canceled, &b.Topic, &b.Quiesced); err != nil {
			return err
		}
		switch {
		case ord == 0 && until != nil:
			held[b.Ref] = *until
		case ord >= 1 && ord <= int64(len(out)):
			out[order[ord-1]] = b
		default:
			return fmt.Errorf("heartbeat: row %d of a batch of %d", ord, len(out))
		}
		return nil
	})
	if err != nil {
		return nil, interpretError("heartbeat", err)
	}
	for i := range out {
		if until, ok := held[out[i].Ref]; ok {
			out[i].LeaseHeld, out[i].LeaseUntil = true, until
		}
	}
	return out, nil
}
