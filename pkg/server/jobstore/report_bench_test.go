package jobstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// BenchmarkReport is the cost of the throughput rollup on the report: one
// report statement settling a batch (the size a busy gateway folds, ~90,
// ADR-0010) of results over a few topics, four in five completions, with
// the rollup (the statement the gateway runs) and without it (the fenced
// UPDATE alone, as before). Claims are made outside the timer. It reports
// the job_throughput rows each statement writes.
//
//	go test ./jobstore -run '^$' -bench BenchmarkReport -count 6
func BenchmarkReport(b *testing.B) {
	const batch, topicCount = 100, 4
	for _, variant := range []struct {
		name   string
		report func(*jobstore.Store, context.Context, []jobstore.Result) ([]jobstore.Ack, error)
	}{
		{"rollup", func(s *jobstore.Store, ctx context.Context, rs []jobstore.Result) ([]jobstore.Ack, error) {
			return s.Report(ctx, "", rs)
		}},
		{"without_rollup", func(s *jobstore.Store, ctx context.Context, rs []jobstore.Result) ([]jobstore.Ack, error) {
			return s.ReportWithoutRollup(ctx, "", rs)
		}},
	} {
		b.Run(fmt.Sprintf("%s/batch=%d", variant.name, batch), func(b *testing.B) {
			pool := newPool(b)
			store := newStore(b, pool, jobstore.ThroughputWriter("bench-gw"))
			topics := make([]string, topicCount)
			for i := range topics {
				topics[i] = fmt.Sprintf("bench.%d", i)
			}
			var upserts int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				jobs := make([]jobstore.NewJob, batch)
				for k := range jobs {
					jobs[k] = newJob(topics[k%topicCount], 5)
				}
				_, err := store.Insert(ctx, jobs)
				require.NoError(b, err)
				claimed, err := store.Claim(ctx, topics, slots("w", batch), ttl)
				require.NoError(b, err)
				require.Len(b, claimed, batch)
				rs := make([]jobstore.Result, batch)
				for k, c := range claimed {
					rs[k] = jobstore.Result{Ref: jobstore.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: jobstore.OutcomeComplete, Worker: "w"}
					if k%5 == 4 {
						rs[k].Outcome, rs[k].Error = jobstore.OutcomeFail, "boom"
					}
				}
				b.StartTimer()

				acks, err := variant.report(store, ctx, rs)

				b.StopTimer()
				require.NoError(b, err)
				for _, a := range acks {
					require.True(b, a.Accepted, a.Reason)
				}
				upserts += rollupRowsWritten(b, store, claimed[0])
				b.StartTimer()
			}
			b.ReportMetric(float64(upserts)/float64(b.N), "rollup-rows/op")
			b.ReportMetric(float64(batch), "results/op")
		})
	}
}

// rollupRowsWritten is how many job_throughput rows the transaction that
// settled job c wrote (inserted or updated): the rows whose xmin is the
// settled job row's.
func rollupRowsWritten(b *testing.B, store *jobstore.Store, c jobstore.Claimed) int64 {
	b.Helper()
	var n int64
	require.NoError(b, store.Pool().QueryRow(ctx, `
		SELECT count(*) FROM job_throughput WHERE xmin::text = (SELECT xmin::text FROM jobs WHERE id = $1)`, c.ID).Scan(&n))
	return n
}
