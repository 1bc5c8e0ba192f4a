package jobstore_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// rollupCounts is one job_throughput total.
type rollupCounts struct{ Completed, Failed, DeadLettered int64 }

// rollupTotals sums job_throughput per topic and writer ("topic/writer").
func rollupTotals(t *testing.T, pool *pgxpool.Pool) map[string]rollupCounts {
	t.Helper()
	rows, err := pool.Query(ctx, `
		SELECT topic, writer, sum(completed)::bigint, sum(failed)::bigint, sum(dead_lettered)::bigint
		FROM job_throughput GROUP BY topic, writer`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]rollupCounts{}
	for rows.Next() {
		var topic, writer string
		var c rollupCounts
		require.NoError(t, rows.Scan(&topic, &writer, &c.Completed, &c.Failed, &c.DeadLettered))
		out[topic+"/"+writer] = c
	}
	require.NoError(t, rows.Err())
	return out
}

// claimN inserts n jobs of topic with maxAttempts and claims them for w.
func claimN(t *testing.T, store *jobstore.Store, topic string, n int, maxAttempts int32, w string) []pulsetype.Claimed {
	t.Helper()
	jobs := make([]pulsetype.NewJob, n)
	for i := range jobs {
		jobs[i] = newJob(topic, 5)
		jobs[i].MaxAttempts = maxAttempts
	}
	_, err := store.Insert(ctx, jobs)
	require.NoError(t, err)
	c, err := store.Claim(ctx, []string{topic}, slots(w, n), ttl)
	require.NoError(t, err)
	require.Len(t, c, n)
	return c
}

func result(c pulsetype.Claimed, o pulsetype.Outcome) pulsetype.Result {
	r := pulsetype.Result{Ref: pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: o, Worker: c.WorkerID}
	if o != pulsetype.OutcomeComplete {
		r.Error = "boom"
	}
	return r
}

// TestThroughputRollup: the statements that settle attempts count them in
// job_throughput in the same statement, exactly: what committed, under
// the writer that settled it, in the minute it settled.
func TestThroughputRollup(t *testing.T) {
	t.Parallel()

	t.Run("CountsEveryKindOfSettlementExactly", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		gw := newStore(t, pool, jobstore.ThroughputWriter("gw-1"))
		reaper := newStore(t, pool, jobstore.ThroughputWriter("reaper-1"))

		mail := claimN(t, gw, "mail", 7, 3, "w")
		last := claimN(t, gw, "mail", 2, 1, "w") // on their last attempt
		var rs []pulsetype.Result
		for _, c := range mail[:3] {
			rs = append(rs, result(c, pulsetype.OutcomeComplete))
		}
		for _, c := range mail[3:5] {
			rs = append(rs, result(c, pulsetype.OutcomeFail)) // retried
		}
		rs = append(rs, result(mail[5], pulsetype.OutcomeFailPermanent))
		rs = append(rs, result(last[0], pulsetype.OutcomeFail)) // dead-lettered: out of attempts
		rs = append(rs, result(last[1], pulsetype.OutcomeComplete))
		acks, err := gw.Report(ctx, "", rs)
		require.NoError(t, err)
		for _, a := range acks {
			require.True(t, a.Accepted, a.Reason)
		}
		// mail[6] is never reported: it is reaped below with the others.

		sms := claimN(t, gw, "sms", 3, 2, "w")
		smsLast := claimN(t, gw, "sms", 1, 1, "w")
		for _, c := range append(sms, smsLast[0], mail[6]) {
			expireLease(t, pool, c.ID)
		}
		reaped, err := reaper.Reap(ctx, 100)
		require.NoError(t, err)
		require.Len(t, reaped, 5)

		require.Equal(t, map[string]rollupCounts{
			"mail/gw-1":     {Completed: 4, Failed: 4, DeadLettered: 2},
			"mail/reaper-1": {Failed: 1},
			"sms/reaper-1":  {Failed: 4, DeadLettered: 1},
		}, rollupTotals(t, pool))

		// The report's row is the minute of its statement's now(), which
		// it also stamped as the completed jobs' finished_at.
		var same int
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT count(*) FROM job_throughput
			WHERE writer = 'gw-1' AND bucket = (
				SELECT date_trunc('minute', max(finished_at), 'UTC') FROM jobs WHERE topic = 'mail' AND status = 'COMPLETED')`).Scan(&same))
		require.Equal(t, 1, same)
	})

	t.Run("AStaleOrForeignReportCountsNothing", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		gw := newStore(t, pool, jobstore.ThroughputWriter("gw-1"))
		c := claimN(t, gw, "t", 3, 3, "w")
		stale := result(c[0], pulsetype.OutcomeComplete)
		stale.Ref.Attempt++ // an attempt that is not the job's
		foreign := result(c[1], pulsetype.OutcomeComplete)
		foreign.Worker = "someone-else"
		acks, err := gw.Report(ctx, "", []pulsetype.Result{stale, foreign})
		require.NoError(t, err)
		require.False(t, acks[0].Accepted)
		require.False(t, acks[1].Accepted)
		require.Empty(t, rollupTotals(t, pool))

		// A result reported twice (a worker's retried RPC) counts once.
		ok := result(c[2], pulsetype.OutcomeComplete)
		acks, err = gw.Report(ctx, "", []pulsetype.Result{ok, ok})
		require.NoError(t, err)
		require.True(t, acks[0].Accepted)
		acks, err = gw.Report(ctx, "", []pulsetype.Result{ok})
		require.NoError(t, err)
		require.False(t, acks[0].Accepted)
		require.Equal(t, map[string]rollupCounts{"t/gw-1": {Completed: 1}}, rollupTotals(t, pool))
	})

	t.Run("TwoWritersInParallelEachCountTheirOwn", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		writers := []*jobstore.Store{
			newStore(t, pool, jobstore.ThroughputWriter("gw-a")),
			newStore(t, pool, jobstore.ThroughputWriter("gw-b")),
		}
		topics := []string{"t1", "t2", "t3"}
		const rounds, perTopic = 10, 4
		// Every round's jobs are claimed first, one writer's worker at a
		// time; the reports then race.
		batches := make([][][]pulsetype.Result, len(writers))
		for wi, s := range writers {
			worker := fmt.Sprintf("w%d", wi)
			for r := range rounds {
				var rs []pulsetype.Result
				// Topics in another order per writer and round: the
				// rollup's rows still lock in key order.
				for k := range topics {
					topic := topics[(k+r+wi)%len(topics)]
					for _, c := range claimN(t, s, topic, perTopic, 1, worker) {
						o := pulsetype.OutcomeComplete
						if r%2 == 1 {
							o = pulsetype.OutcomeFail
						}
						rs = append(rs, result(c, o))
					}
				}
				batches[wi] = append(batches[wi], rs)
			}
		}
		var wg sync.WaitGroup
		for wi, s := range writers {
			wg.Go(func() {
				for _, rs := range batches[wi] {
					acks, err := s.Report(ctx, "", rs)
					if !assertNoError(t, err) {
						return
					}
					for _, a := range acks {
						if !a.Accepted {
							t.Errorf("not settled: %s", a.Reason)
						}
					}
				}
			})
		}
		wg.Wait()
		want := map[string]rollupCounts{}
		for _, w := range []string{"gw-a", "gw-b"} {
			for _, topic := range topics {
				// Half the rounds complete, half fail their only attempt.
				want[topic+"/"+w] = rollupCounts{Completed: rounds / 2 * perTopic, Failed: rounds / 2 * perTopic, DeadLettered: rounds / 2 * perTopic}
			}
		}
		require.Equal(t, want, rollupTotals(t, pool))
	})

	t.Run("AResultPostgresRefusesFailsAloneAndTheOthersCount", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		gw := newStore(t, pool, jobstore.ThroughputWriter("gw-1"))
		c := claimN(t, gw, "t", 9, 3, "w")
		rs := make([]pulsetype.Result, len(c))
		for i := range c {
			rs[i] = result(c[i], pulsetype.OutcomeComplete)
		}
		rs[4] = result(c[4], pulsetype.OutcomeFail)
		rs[4].Error = "nul\x00byte" // Postgres refuses it as a value
		rs[7] = result(c[7], pulsetype.OutcomeFail)
		acks, errs := jobstore.Isolate(rs, func(batch []pulsetype.Result) ([]pulsetype.Ack, error) {
			return gw.Report(ctx, "", batch)
		})
		for i := range rs {
			if i == 4 {
				require.Error(t, errs[i])
				require.True(t, jobstore.IsDataError(errs[i]), "%v", errs[i])
				continue
			}
			require.NoError(t, errs[i], i)
			require.True(t, acks[i].Accepted, i)
		}
		require.Equal(t, map[string]rollupCounts{"t/gw-1": {Completed: 7, Failed: 1}}, rollupTotals(t, pool))
	})

	t.Run("RetentionDeletesOnlyOldRowsInBatches", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		store := newStore(t, pool)
		_, err := pool.Exec(ctx, `
			INSERT INTO job_throughput (bucket, topic, writer, completed)
			SELECT date_trunc('minute', now() - make_interval(days => d), 'UTC'), 't' || k, 'gw', 1
			FROM unnest(ARRAY[0, 1, 2, 3, 5, 6, 8, 9, 10]) AS d, generate_series(1, 3) AS k`)
		require.NoError(t, err)

		var total int64
		for {
			n, err := store.DeleteThroughput(ctx, 7*24*time.Hour, 4)
			require.NoError(t, err)
			total += n
			if n < 4 {
				break
			}
		}
		require.Equal(t, int64(3*3), total, "days 8, 9 and 10 are older than 7 days, three topics each")
		var oldest time.Duration
		var micros int64
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT (extract(epoch FROM now() - min(bucket)) * 1000000)::bigint FROM job_throughput`).Scan(&micros))
		oldest = time.Duration(micros) * time.Microsecond
		require.Less(t, oldest, 7*24*time.Hour)

		_, err = store.DeleteThroughput(ctx, -time.Second, 10)
		require.Equal(t, apierr.KindInvalidArgument, apierr.KindOf(err))
		_, err = store.DeleteThroughput(ctx, time.Hour, 0)
		require.Equal(t, apierr.KindInvalidArgument, apierr.KindOf(err))
	})

	t.Run("WriterNamesAreChecked", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, jobstore.ValidWriter("gw-1"))
		require.NoError(t, jobstore.ValidWriter(strings.Repeat("é", jobstore.MaxWriterLength)))
		for _, bad := range []string{"", strings.Repeat("x", jobstore.MaxWriterLength+1), "nul\x00", "\xff"} {
			require.Error(t, jobstore.ValidWriter(bad), "%q", bad)
		}
		// What it accepts, job_throughput stores.
		pool := newPool(t)
		for _, good := range []string{"gw-1", strings.Repeat("é", jobstore.MaxWriterLength)} {
			_, err := pool.Exec(ctx, `INSERT INTO job_throughput (bucket, topic, writer) VALUES (date_trunc('minute', now(), 'UTC'), 't', $1)`, good)
			require.NoError(t, err)
		}
	})
}

// assertNoError is require.NoError for a goroutine other than the test's.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
