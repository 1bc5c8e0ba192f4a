package jobstore_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// claimBeforeLimitsSQL is the claim statement as it was before topic
// limits (ADR-0017), kept as the benchmark's baseline: the same batch
// without the limit locks, one walk of the claim index.
const claimBeforeLimitsSQL = `
WITH picked AS (
    SELECT id FROM jobs
    WHERE status IN ('PENDING', 'RETRYING')
      AND next_run_at <= now()
      AND topic = ANY($1::text[])
      AND NOT EXISTS (SELECT 1 FROM dispatch_control WHERE scope = '*' AND paused)
      AND topic <> ALL (ARRAY(SELECT scope FROM dispatch_control WHERE paused))
    ORDER BY priority DESC, submitted_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), slotted AS (
    SELECT id, row_number() OVER () AS slot FROM picked
)
UPDATE jobs AS j
SET status      = 'RUNNING',
    attempts    = j.attempts + 1,
    locked_by   = ($3::text[])[slotted.slot],
    lease_until = now() + $4::interval,
    started_at  = GREATEST(now(), j.submitted_at)
FROM slotted
WHERE j.id = slotted.id
RETURNING j.id, j.attempts`

// BenchmarkClaimTopicLimit measures what a topic limit costs the claim
// (docs/topics.md): claims of 50 slots over a 40,000-job backlog of the group's topics while
// 3,000 jobs of another topic run, for a group with no limited topic, a
// group of one limited topic (a limit it never reaches, so only the cost
// shows) and a group mixing both. Each iteration runs the claim twice,
// the store's and the claim as it was before limits (claimBeforeLimitsSQL)
// on the same topics, back to back in alternating order, and reports both as µs/claim: paired
// on one database, so a busy machine slows both alike. Claimed jobs are
// completed, and the table vacuumed every 20 iterations, outside the
// timings, so the running count and the walk stay put.
//
//	go test -run '^$' -bench BenchmarkClaimTopicLimit -benchtime 200x ./pkg/server/jobstore/
func BenchmarkClaimTopicLimit(b *testing.B) {
	for _, g := range []struct {
		name   string
		topics []string
	}{
		{"unlimited", []string{"bench.open"}},
		{"limited", []string{"bench.limited"}},
		{"mixed", []string{"bench.limited", "bench.open"}},
	} {
		b.Run("group="+g.name, func(b *testing.B) {
			pool := pgtest.Pool(b)
			s := newStore(b, pool)
			if _, err := pool.Exec(ctx, `
INSERT INTO jobs (id, topic, priority) SELECT gen_random_uuid(), 'bench.other', 5 FROM generate_series(1, 3000);
INSERT INTO topic_limits (topic, max_running, updated_by) VALUES ('bench.limited', 1000000, 'bench')`); err != nil {
				b.Fatal(err)
			}
			// The group's own backlog only: a walk past another topic's
			// backlog costs the old claim and the new alike.
			if _, err := pool.Exec(ctx, `
INSERT INTO jobs (id, topic, priority)
SELECT gen_random_uuid(), ($1::text[])[1 + g % cardinality($1::text[])], g % 11 FROM generate_series(1, 40000) AS g`, g.topics); err != nil {
				b.Fatal(err)
			}
			if got, err := s.Claim(ctx, []string{"bench.other"}, slots("other", 3000), ttl); err != nil || len(got) != 3000 {
				b.Fatalf("claim the running set: %d, %v", len(got), err)
			}
			if _, err := pool.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
				b.Fatal(err)
			}
			completeAll := func(refs []pulsetype.AttemptRef) {
				results := make([]pulsetype.Result, len(refs))
				for i, r := range refs {
					results[i] = pulsetype.Result{Ref: r, Outcome: pulsetype.OutcomeComplete}
				}
				if _, err := s.Report(ctx, "w", results); err != nil {
					b.Fatal(err)
				}
			}
			var now, before time.Duration
			b.ResetTimer()
			for i := range b.N {
				if i%20 == 19 {
					// As autovacuum would: the claimed rows' dead entries at
					// the head of the index would otherwise make every walk
					// longer than the last, the old claim's and the new alike.
					if _, err := pool.Exec(ctx, `VACUUM jobs`); err != nil {
						b.Fatal(err)
					}
				}
				claimNow := func() {
					start := time.Now()
					got, err := s.Claim(ctx, g.topics, slots("w", 50), ttl)
					now += time.Since(start)
					if err != nil || len(got) != 50 {
						b.Fatalf("claimed %d: %v", len(got), err)
					}
					refs := make([]pulsetype.AttemptRef, len(got))
					for i, c := range got {
						refs[i] = pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}
					}
					completeAll(refs)
				}
				claimBefore := func() {
					start := time.Now()
					batch := &pgx.Batch{}
					batch.Queue(`SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true), pg_advisory_xact_lock_shared(` + jobstore.PauseBarrierKey + `)`)
					batch.Queue(claimBeforeLimitsSQL, g.topics, 50, slots("w", 50), "1 minute")
					br := pool.SendBatch(ctx, batch)
					if _, err := br.Exec(); err != nil {
						b.Fatal(err)
					}
					rows, err := br.Query()
					if err != nil {
						b.Fatal(err)
					}
					var refs []pulsetype.AttemptRef
					for rows.Next() {
						var r pulsetype.AttemptRef
						if err := rows.Scan(&r.ID, &r.Attempt); err != nil {
							b.Fatal(err)
						}
						refs = append(refs, r)
					}
					if err := rows.Err(); err != nil {
						b.Fatal(err)
					}
					if err := br.Close(); err != nil {
						b.Fatal(err)
					}
					before += time.Since(start)
					if len(refs) != 50 {
						b.Fatalf("the baseline claimed %d", len(refs))
					}
					completeAll(refs)
				}
				// Which runs first alternates, so neither gains from going
				// first after a vacuum or a report.
				if i%2 == 0 {
					claimNow()
					claimBefore()
				} else {
					claimBefore()
					claimNow()
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(now.Microseconds())/float64(b.N), "µs/claim")
			b.ReportMetric(float64(before.Microseconds())/float64(b.N), "µs/claim-before-limits")
			b.ReportMetric(0, "ns/op")
		})
	}
}
