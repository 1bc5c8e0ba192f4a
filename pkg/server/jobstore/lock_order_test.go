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
	claimed := claimN(t, b.store, "lock.order", 3, 3, "w")
	slices.SortFunc(claimed, func(x, y pulsetype.Claimed) int { return bytes.Compare(x.ID[:], y.ID[:]) })
	ref := func(c pulsetype.Claimed) pulsetype.AttemptRef {
		return pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}
	}
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

// Two batches holding the same idempotency keys in opposite orders, inserted
// at the same time: the first holds k1 and waits on a third transaction's
// uncommitted kx, the second inserts k2 and then waits on the first's k1.
// Inserted in the order they were given, the first would go on to k2 and
// wait on the second — a deadlock Postgres ends by failing one batch whole.
// Both insert their keys in one order, so the second waits for the first,
// then finds its keys taken and answers the first's jobs.
func TestKeyedBatchesInOppositeOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keyed := func(key string) pulsetype.NewJob {
		j := newJob("keys.order", 5)
		j.IdempotencyKey = key
		return j
	}
	type answer struct {
		res  []pulsetype.Inserted
		errs []error
	}
	insert := func(jobs []pulsetype.NewJob) <-chan answer {
		done := make(chan answer, 1)
		go func() {
			res, errs := b.store.InsertEach(ctx, jobs)
			done <- answer{res, errs}
		}()
		return done
	}

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back below
	_, err = tx.Exec(ctx, `INSERT INTO jobs (id, topic, idempotency_key) VALUES (gen_random_uuid(), 'keys.order', 'kx')`)
	require.NoError(t, err)

	first := []pulsetype.NewJob{keyed("k1"), keyed("kx"), keyed("k2")}
	second := []pulsetype.NewJob{keyed("k2"), keyed("k1")}
	firstDone := insert(first)
	waitForLockWaiters(t, b, 1) // the first waits on kx
	secondDone := insert(second)
	waitForLockWaiters(t, b, 2) // the second waits on the first
	require.NoError(t, tx.Rollback(ctx))

	a1, a2 := <-firstDone, <-secondDone
	require.Nil(t, a1.errs)
	require.Nil(t, a2.errs)
	for i, j := range first {
		require.Equal(t, pulsetype.Inserted{ID: j.ID}, a1.res[i], "the first batch inserts %s", j.IdempotencyKey)
	}
	require.Equal(t, []pulsetype.Inserted{{ID: first[2].ID, Duplicate: true}, {ID: first[0].ID, Duplicate: true}}, a2.res,
		"the second batch answers the first's jobs")
	require.Equal(t, 3, countTopic(t, b.pool, "keys.order"))
}
