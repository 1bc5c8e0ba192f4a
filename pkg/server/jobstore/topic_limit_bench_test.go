package jobstore_test

import (
	"testing"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// BenchmarkClaimTopicLimit measures what a topic limit costs the claim
// (docs/topics.md): a claim of 50 slots over a 40,000-job backlog while
// 3,000 jobs of another topic run, for a group with no limited topic, a
// group of one limited topic (a limit it never reaches, so only the cost
// shows) and a group mixing both. Each group runs on a database of its
// own; claimed jobs are completed outside the timer, so the running count
// stays put.
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
INSERT INTO jobs (id, topic, priority)
SELECT gen_random_uuid(), (ARRAY['bench.limited', 'bench.open'])[1 + g % 2], g % 11 FROM generate_series(1, 40000) AS g;
INSERT INTO topic_limits (topic, max_running, updated_by) VALUES ('bench.limited', 1000000, 'bench')`); err != nil {
				b.Fatal(err)
			}
			if got, err := s.Claim(ctx, []string{"bench.other"}, slots("other", 3000), ttl); err != nil || len(got) != 3000 {
				b.Fatalf("claim the running set: %d, %v", len(got), err)
			}
			if _, err := pool.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				got, err := s.Claim(ctx, g.topics, slots("w", 50), ttl)
				if err != nil || len(got) != 50 {
					b.Fatalf("claimed %d: %v", len(got), err)
				}
				b.StopTimer()
				results := make([]jobstore.Result, len(got))
				for i, c := range got {
					results[i] = jobstore.Result{Ref: jobstore.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: jobstore.OutcomeComplete}
				}
				if _, err := s.Report(ctx, "w", results); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
