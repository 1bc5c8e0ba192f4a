package jobstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// BenchmarkReport is the cost of the throughput rollup on the report: one
// report statement settling a batch (the size a busy gateway folds, ~90,
// ADR-0010) of results over a few topics, four in five completions, with
// the rollup (the statement the gateway runs) and without it (the fenced
// UPDATE alone, as before). Each iteration runs both, in alternating
// order, on the same database, so a machine whose load drifts (a shared
// one) weighs on both alike; claims are made outside the timings. It
// reports each statement's own time and the job_throughput rows the
// rollup wrote (one per topic).
//
//	go test ./jobstore -run '^$' -bench BenchmarkReport -benchtime 300x -count 3
func BenchmarkReport(b *testing.B) {
	const batch, topicCount = 100, 4
	pool := newPool(b)
	store := newStore(b, pool, jobstore.ThroughputWriter("bench-gw"))
	topics := make([]string, topicCount)
	for i := range topics {
		topics[i] = fmt.Sprintf("bench.%d", i)
	}
	// claimBatch leases batch fresh jobs and returns their results.
	claimBatch := func() []pulsetype.Result {
		jobs := make([]pulsetype.NewJob, batch)
		for k := range jobs {
			jobs[k] = newJob(topics[k%topicCount], 5)
		}
		_, err := store.Insert(ctx, jobs)
		require.NoError(b, err)
		claimed, err := store.Claim(ctx, topics, slots("w", batch), ttl)
		require.NoError(b, err)
		require.Len(b, claimed, batch)
		rs := make([]pulsetype.Result, batch)
		for k, c := range claimed {
			rs[k] = pulsetype.Result{Ref: pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: pulsetype.OutcomeComplete, Worker: "w"}
			if k%5 == 4 {
				rs[k].Outcome, rs[k].Error = pulsetype.OutcomeFail, "boom"
			}
		}
		return rs
	}
	var rollup, plain time.Duration
	var rows int64
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		withRollup, without := claimBatch(), claimBatch()
		b.StartTimer()
		for k := range 2 {
			if (i+k)%2 == 0 {
				start := time.Now()
				acks, err := store.Report(ctx, "", withRollup)
				rollup += time.Since(start)
				require.NoError(b, err)
				require.True(b, acks[0].Accepted)
				b.StopTimer()
				rows += rollupRowsWritten(b, store, withRollup[0].Ref.ID.String())
				b.StartTimer()
				continue
			}
			start := time.Now()
			acks, err := store.ReportWithoutRollup(ctx, "", without)
			plain += time.Since(start)
			require.NoError(b, err)
			require.True(b, acks[0].Accepted)
		}
	}
	b.ReportMetric(float64(rollup.Nanoseconds())/float64(b.N), "rollup-ns/report")
	b.ReportMetric(float64(plain.Nanoseconds())/float64(b.N), "plain-ns/report")
	b.ReportMetric(float64(rows)/float64(b.N), "rollup-rows/report")
	b.ReportMetric(batch, "results/report")
}

// rollupRowsWritten is how many job_throughput rows the transaction that
// settled job id wrote (inserted or updated): the rows whose xmin is the
// settled job row's.
func rollupRowsWritten(b *testing.B, store *jobstore.Store, id string) int64 {
	b.Helper()
	var n int64
	require.NoError(b, store.Pool().QueryRow(ctx, `
		SELECT count(*) FROM job_throughput WHERE xmin::text = (SELECT xmin::text FROM jobs WHERE id = $1)`, id).Scan(&n))
	return n
}
