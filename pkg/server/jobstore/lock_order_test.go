package jobstore_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// waitForLockWaiters returns once n backends of the test's database wait
// on a lock.
func waitForLockWaiters(t *testing.T, b *testBundle, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var got int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got))
		return got >= n
	}, 10*time.Second, 5*time.Millisecond)
}

// A heartbeat and a report of the same running jobs, given in opposite
// orders, at the same time: the heartbeat holds A and waits on a third
// transaction's lock of X, the report settles B and then waits on A. Run
// in the order given, the heartbeat would go on from X to B and wait on
// the report — a deadlock Postgres ends by failing one of them. Both reach
// their rows in id order, so the report waits for the heartbeat and then
// settles both jobs.
func TestAHeartbeatAndAReportOfTheSameJobsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	jobs := make([]pulsetype.NewJob, 3)
	for i := range jobs {
		jobs[i] = newJob("lock.order", 5)
	}
	_, err := b.store.Insert(ctx, jobs)
	require.NoError(t, err)
	claimed, err := b.store.Claim(ctx, []string{"lock.order"}, slots("w", 3), ttl)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	slices.SortFunc(claimed, func(x, y pulsetype.Claimed) int { return bytes.Compare(x.ID[:], y.ID[:]) })
	ref := func(c pulsetype.Claimed) pulsetype.AttemptRef { return pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt} }
	a, bb, x := claimed[0], claimed[1], claimed[2]

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back below
	_, err = tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, x.ID)
	require.NoError(t, err)

	type beats struct {
		beats []pulsetype.Beat
		err   error
	}
	beatDone := make(chan beats, 1)
	go func() {
		got, err := b.store.Heartbeat(ctx, "w", []pulsetype.AttemptRef{ref(a), ref(x), ref(bb)}, time.Minute)
		beatDone <- beats{got, err}
	}()
	waitForLockWaiters(t, b, 1) // the heartbeat waits on x
	type acks struct {
		acks []pulsetype.Ack
		err  error
	}
	reportDone := make(chan acks, 1)
	go func() {
		got, err := b.store.Report(ctx, "w", []pulsetype.Result{
			{Ref: ref(bb), Outcome: pulsetype.OutcomeComplete},
			{Ref: ref(a), Outcome: pulsetype.OutcomeComplete},
		})
		reportDone <- acks{got, err}
	}()
	waitForLockWaiters(t, b, 2) // the report waits on the heartbeat
	require.NoError(t, tx.Rollback(ctx))

	hb, rep := <-beatDone, <-reportDone
	require.NoError(t, hb.err)
	require.NoError(t, rep.err)
	require.Len(t, hb.beats, 3)
	for i, want := range []pulsetype.Claimed{a, x, bb} {
		require.Equal(t, ref(want), hb.beats[i].Ref, "beat %d answers its own job", i)
		require.True(t, hb.beats[i].LeaseHeld, "beat %d held its lease", i)
	}
	require.Len(t, rep.acks, 2)
	for i, want := range []pulsetype.Claimed{bb, a} {
		require.Equal(t, ref(want), rep.acks[i].Ref)
		require.True(t, rep.acks[i].Accepted, "result %d settled: %s", i, rep.acks[i].Reason)
	}
	require.Equal(t, pulsetype.StatusCompleted, statusOf(t, b.pool, a.ID))
	require.Equal(t, pulsetype.StatusCompleted, statusOf(t, b.pool, bb.ID))
	require.Equal(t, pulsetype.StatusRunning, statusOf(t, b.pool, x.ID))
}
