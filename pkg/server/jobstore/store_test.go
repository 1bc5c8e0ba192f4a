package jobstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

type testBundle struct {
	pool  *pgxpool.Pool
	store *jobstore.Store
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	return &testBundle{pool: pool, store: newStore(t, pool)}
}

const ttl = time.Minute

var ctx = context.Background()

func slots(worker string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = worker
	}
	return s
}

// expireLease pretends the lease lapsed, as if the worker went silent.
func expireLease(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) {
	t.Helper()
	_, err := pool.Exec(ctx, `UPDATE jobs SET lease_until = now() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
}

// reclaimAfterLapse lets id's lease lapse, has the reaper take it back with
// no backoff, and claims it again for worker with leaseTTL: the job's next
// attempt, while the previous holder may still be running the last one.
func reclaimAfterLapse(t *testing.T, b *testBundle, id uuid.UUID, worker string, leaseTTL time.Duration) pulsetype.Claimed {
	t.Helper()
	expireLease(t, b.pool, id)
	setRetryPolicy(t, b.store, 0, 0)
	reaped, err := b.store.Reap(ctx, 10)
	require.NoError(t, err)
	require.Len(t, reaped, 1)
	claimed, err := b.store.Claim(ctx, []string{"test.topic"}, slots(worker, 1), leaseTTL)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	return claimed[0]
}

// requireReportRefused reports res as worker and requires the store to
// refuse it with a reason containing reason, leaving the job in status.
func requireReportRefused(t *testing.T, b *testBundle, worker string, res pulsetype.Result, reason string, status pulsetype.Status) {
	t.Helper()
	acks, err := b.store.Report(ctx, worker, []pulsetype.Result{res})
	require.NoError(t, err)
	require.False(t, acks[0].Accepted, "the report is refused")
	require.Contains(t, acks[0].Reason, reason)
	require.Equal(t, status, statusOf(t, b.pool, res.Ref.ID))
}

// makeDue makes a RETRYING job claimable now instead of after its backoff.
func makeDue(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) {
	t.Helper()
	_, err := pool.Exec(ctx, `UPDATE jobs SET next_run_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
}

func TestClaim(t *testing.T) {
	t.Parallel()

	t.Run("ClaimsInPriorityThenFIFOOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		base := time.Now().Add(-time.Hour)
		low := insertRow(t, b.pool, rowOpts{Priority: 1, SubmittedAt: base})
		highLate := insertRow(t, b.pool, rowOpts{Priority: 9, SubmittedAt: base.Add(2 * time.Second)})
		highEarly := insertRow(t, b.pool, rowOpts{Priority: 9, SubmittedAt: base.Add(time.Second)})
		mid := insertRow(t, b.pool, rowOpts{Priority: 5, SubmittedAt: base})

		var got []uuid.UUID
		for range 4 {
			c, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w", 1), ttl)
			require.NoError(t, err)
			require.Len(t, c, 1)
			got = append(got, c[0].ID)
		}
		require.Equal(t, []uuid.UUID{highEarly, highLate, mid, low}, got)
	})

	t.Run("LeasesEachJobToItsSlotsWorker", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for range 3 {
			insertRow(t, b.pool, rowOpts{})
		}
		c, err := b.store.Claim(ctx, []string{"test.topic"}, []string{"w1", "w2", "w2"}, ttl)
		require.NoError(t, err)
		require.Len(t, c, 3)
		count := map[string]int{}
		for _, cl := range c {
			count[cl.WorkerID]++
			require.EqualValues(t, 1, cl.Attempt)
			require.True(t, cl.LeaseUntil.After(time.Now()))
			var lockedBy string
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT locked_by FROM jobs WHERE id = $1 AND status = 'RUNNING'`, cl.ID).Scan(&lockedBy))
			require.Equal(t, cl.WorkerID, lockedBy)
		}
		require.Equal(t, map[string]int{"w1": 1, "w2": 2}, count)
	})

	t.Run("TakesOnlyTheSubscribedTopicsAndDueJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertRow(t, b.pool, rowOpts{Topic: "other"})
		future := newJob("test.topic", 5)
		future.RunAt = time.Now().Add(time.Hour)
		_, err := b.store.Insert(ctx, []pulsetype.NewJob{future})
		require.NoError(t, err)
		c, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w", 5), ttl)
		require.NoError(t, err)
		require.Empty(t, c)
	})

	t.Run("ConcurrentClaimsTakeDisjointJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobs := make([]pulsetype.NewJob, 500)
		for i := range jobs {
			jobs[i] = newJob("test.topic", 5)
		}
		_, err := b.store.Insert(ctx, jobs)
		require.NoError(t, err)
		results := make(chan []pulsetype.Claimed)
		for g := range 5 {
			go func() {
				var mine []pulsetype.Claimed
				for {
					c, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w"+string(rune('a'+g)), 7), ttl)
					if err != nil || len(c) == 0 {
						results <- mine
						return
					}
					mine = append(mine, c...)
				}
			}()
		}
		seen := map[uuid.UUID]bool{}
		for range 5 {
			for _, c := range <-results {
				require.False(t, seen[c.ID], "job %s claimed twice", c.ID)
				seen[c.ID] = true
			}
		}
		require.Len(t, seen, 500)
	})
}

func TestInsert(t *testing.T) {
	t.Parallel()

	t.Run("SameIdempotencyKeyReturnsTheLiveJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := newJob("test.topic", 5)
		first.IdempotencyKey = "order-42"
		res, err := b.store.Insert(ctx, []pulsetype.NewJob{first})
		require.NoError(t, err)
		require.False(t, res[0].Duplicate)

		again := newJob("test.topic", 5)
		again.IdempotencyKey = "order-42"
		sameBatch := newJob("test.topic", 5)
		sameBatch.IdempotencyKey = "order-43"
		sameBatchTwin := newJob("test.topic", 5)
		sameBatchTwin.IdempotencyKey = "order-43"
		res, err = b.store.Insert(ctx, []pulsetype.NewJob{again, sameBatch, sameBatchTwin})
		require.NoError(t, err)
		require.Equal(t, pulsetype.Inserted{ID: first.ID, Duplicate: true}, res[0])
		require.Equal(t, pulsetype.Inserted{ID: sameBatch.ID, Duplicate: false}, res[1])
		require.Equal(t, pulsetype.Inserted{ID: sameBatch.ID, Duplicate: true}, res[2])

		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n))
		require.Equal(t, 2, n)
	})

	t.Run("KeyIsFreeAgainOnceItsJobFinished", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := newJob("test.topic", 5)
		first.IdempotencyKey = "k"
		_, err := b.store.Insert(ctx, []pulsetype.NewJob{first})
		require.NoError(t, err)
		_, err = b.store.Cancel(ctx, first.ID)
		require.NoError(t, err)
		second := newJob("test.topic", 5)
		second.IdempotencyKey = "k"
		res, err := b.store.Insert(ctx, []pulsetype.NewJob{second})
		require.NoError(t, err)
		require.Equal(t, pulsetype.Inserted{ID: second.ID}, res[0])
	})

	t.Run("SameIDIsADuplicateNotASecondJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		j := newJob("test.topic", 5)
		_, err := b.store.Insert(ctx, []pulsetype.NewJob{j})
		require.NoError(t, err)
		res, err := b.store.Insert(ctx, []pulsetype.NewJob{j})
		require.NoError(t, err)
		require.True(t, res[0].Duplicate)
	})

	t.Run("SameIDTwiceInOneBatchIsOneJob", func(t *testing.T) {
		// A batch without idempotency keys first goes in as a plain INSERT;
		// the repeated id makes that statement fail as a whole, and the
		// ordinary ON CONFLICT path inserts the batch instead.
		t.Parallel()
		b := setup(t)
		j, other := newJob("test.topic", 5), newJob("test.topic", 5)
		res, err := b.store.Insert(ctx, []pulsetype.NewJob{j, other, j})
		require.NoError(t, err)
		require.Len(t, res, 3)
		require.Equal(t, []uuid.UUID{j.ID, other.ID, j.ID}, []uuid.UUID{res[0].ID, res[1].ID, res[2].ID})
		require.False(t, res[1].Duplicate)
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n))
		require.Equal(t, 2, n)
	})

	t.Run("BatchInsertNotifiesOncePerTopic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		conn := listenReady(t, b)

		var jobs []pulsetype.NewJob
		for i := range 100 {
			topic := "a"
			if i%2 == 1 {
				topic = "b"
			}
			jobs = append(jobs, newJob(topic, 5))
		}
		_, err := b.store.Insert(ctx, jobs)
		require.NoError(t, err)
		// A marker statement afterwards: once its notification arrives, every
		// notification of the batch insert has arrived too.
		_, err = b.pool.Exec(ctx, `SELECT pg_notify($1, 'marker')`, jobstore.ReadyChannel)
		require.NoError(t, err)

		got := map[string]int{}
		for {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			require.NoError(t, err)
			if n.Payload == "marker" {
				break
			}
			topic, _, ok := jobstore.ReadyAt(n.Payload)
			require.True(t, ok, "the store's insert names its jobs' submit time: %q", n.Payload)
			got[topic]++
		}
		require.Equal(t, map[string]int{"a": 1, "b": 1}, got)
	})

	// An insert that notifies at its commit (a producer's own, through
	// pulsetx; the store's wake after the commit names a time instead,
	// ADR-0063) says its jobs are new when the statement ran within
	// moments of its transaction's start (ADR-0055): they sort after every
	// claim cursor. The judgement is the clock's, so a statement
	// descheduled for 10 ms says nothing new; of several inserts one at
	// least is new.
	t.Run("AnInsertSaysItsJobsAreNew", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		conn := listenReady(t, b)
		payloads := map[string]int{}
		for range 10 {
			_, err := b.pool.Exec(ctx, `INSERT INTO jobs (id, topic, args) VALUES (gen_random_uuid(), 'fresh', '{}')`)
			require.NoError(t, err)
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			require.NoError(t, err)
			payloads[n.Payload]++
		}
		require.Positive(t, payloads["fresh"+jobstore.NewJobsReady], "%v", payloads)
		require.Equal(t, 10, payloads["fresh"+jobstore.NewJobsReady]+payloads["fresh"], "%v", payloads)
	})

	// Jobs inserted by a transaction that began earlier (a producer's own)
	// may sort before a cursor: their notification is the plain topic.
	t.Run("AnInsertInAnOlderTransactionSaysNothingNew", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		conn := listenReady(t, b)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		_, err = tx.Exec(ctx, `SELECT pg_sleep(0.02)`)
		require.NoError(t, err)
		_, err = jobstore.InsertOne(ctx, txQueryer{tx}, newJob("older", 5))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		require.NoError(t, err)
		require.Equal(t, "older", n.Payload)
	})
}

func TestReport(t *testing.T) {
	t.Parallel()

	claimOne := func(t *testing.T, b *testBundle, worker string) pulsetype.Claimed {
		t.Helper()
		c, err := b.store.Claim(ctx, []string{"test.topic"}, slots(worker, 1), ttl)
		require.NoError(t, err)
		require.Len(t, c, 1)
		return c[0]
	}
	ref := func(c pulsetype.Claimed) pulsetype.AttemptRef {
		return pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}
	}

	t.Run("CompleteFinishesTheJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertRow(t, b.pool, rowOpts{})
		c := claimOne(t, b, "w")
		acks, err := b.store.Report(ctx, "w", []pulsetype.Result{{Ref: ref(c), Outcome: pulsetype.OutcomeComplete}})
		require.NoError(t, err)
		require.True(t, acks[0].Accepted)
		require.Equal(t, pulsetype.StatusCompleted, acks[0].Status)
		job, err := b.store.Get(ctx, c.ID)
		require.NoError(t, err)
		require.Equal(t, pulsetype.StatusCompleted, job.Status)
		require.NotNil(t, job.FinishedAt)
		require.Nil(t, job.LeaseUntil)
	})

	t.Run("FailRetriesWithSquaredBackoffThenDeadLettersWithHistory", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertRow(t, b.pool, rowOpts{MaxAttempts: 3})
		setRetryPolicy(t, b.store, time.Minute, time.Hour)
		for attempt := int32(1); attempt <= 3; attempt++ {
			c := claimOne(t, b, "w")
			require.Equal(t, attempt, c.Attempt)
			before := time.Now()
			acks, err := b.store.Report(ctx, "w", []pulsetype.Result{{Ref: ref(c), Outcome: pulsetype.OutcomeFail, Error: "boom " + string(rune('0'+attempt))}}) //nolint:unconvert // vet refuses string(int32) without the rune conversion
			require.NoError(t, err)
			require.True(t, acks[0].Accepted)
			if attempt < 3 {
				require.Equal(t, pulsetype.StatusRetrying, acks[0].Status)
				wait := time.Duration(attempt*attempt) * time.Minute
				require.WithinDuration(t, before.Add(wait), acks[0].NextRunAt, 5*time.Second)
				// Not claimable before its backoff has passed.
				none, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w", 1), ttl)
				require.NoError(t, err)
				require.Empty(t, none)
				makeDue(t, b.pool, id)
			} else {
				require.Equal(t, pulsetype.StatusDeadLettered, acks[0].Status)
			}
		}
		job, err := b.store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pulsetype.StatusDeadLettered, job.Status)
		require.Len(t, job.Errors, 3)
		for i, e := range job.Errors {
			require.Equal(t, i+1, e.Attempt)
			require.Equal(t, "boom "+string(rune('1'+i)), e.Error)
			require.Equal(t, "w", e.Worker)
			require.False(t, e.At.IsZero())
		}
	})

	t.Run("PermanentFailureDeadLettersAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertRow(t, b.pool, rowOpts{MaxAttempts: 10})
		c := claimOne(t, b, "w")
		acks, err := b.store.Report(ctx, "w", []pulsetype.Result{{Ref: ref(c), Outcome: pulsetype.OutcomeFailPermanent, Error: "bad input"}})
		require.NoError(t, err)
		require.Equal(t, pulsetype.StatusDeadLettered, acks[0].Status)
	})

	t.Run("StaleReportIsRejectedAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertRow(t, b.pool, rowOpts{})
		old := claimOne(t, b, "w1")
		current := reclaimAfterLapse(t, b, id, "w2", ttl)
		require.EqualValues(t, 2, current.Attempt)

		requireReportRefused(t, b, "w1", pulsetype.Result{Ref: ref(old), Outcome: pulsetype.OutcomeComplete}, "stale", pulsetype.StatusRunning)
	})

	t.Run("MixedBatchIsAnsweredPerResult", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for range 3 {
			insertRow(t, b.pool, rowOpts{})
		}
		c, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w", 3), ttl)
		require.NoError(t, err)
		require.Len(t, c, 3)
		results := []pulsetype.Result{
			{Ref: ref(c[0]), Outcome: pulsetype.OutcomeComplete},
			{Ref: pulsetype.AttemptRef{ID: c[1].ID, Attempt: 9}, Outcome: pulsetype.OutcomeComplete},
			{Ref: ref(c[2]), Outcome: pulsetype.OutcomeFail, Error: "x"},
			{Ref: pulsetype.AttemptRef{ID: uuid.Must(uuid.NewV7()), Attempt: 1}, Outcome: pulsetype.OutcomeComplete},
		}
		acks, err := b.store.Report(ctx, "w", results)
		require.NoError(t, err)
		require.Len(t, acks, 4)
		require.True(t, acks[0].Accepted)
		require.False(t, acks[1].Accepted)
		require.True(t, acks[2].Accepted)
		require.Equal(t, pulsetype.StatusRetrying, acks[2].Status)
		require.False(t, acks[3].Accepted)
		require.Contains(t, acks[3].Reason, "not found")
	})
}

func TestFencing(t *testing.T) {
	t.Parallel()

	t.Run("StaleHeartbeatIsANoOp", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertRow(t, b.pool, rowOpts{})
		c1, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w1", 1), ttl)
		require.NoError(t, err)
		c2 := reclaimAfterLapse(t, b, id, "w2", time.Second)

		beats, err := b.store.Heartbeat(ctx, "w1", []pulsetype.AttemptRef{{ID: id, Attempt: c1[0].Attempt}}, time.Hour)
		require.NoError(t, err)
		require.False(t, beats[0].LeaseHeld)
		job, err := b.store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "w2", job.LockedBy)
		require.WithinDuration(t, c2.LeaseUntil, *job.LeaseUntil, 0, "the zombie's beat must not extend the new owner's lease")

		beats, err = b.store.Heartbeat(ctx, "w2", []pulsetype.AttemptRef{{ID: id, Attempt: c2.Attempt}}, time.Hour)
		require.NoError(t, err)
		require.True(t, beats[0].LeaseHeld)
		require.True(t, beats[0].LeaseUntil.After(c2.LeaseUntil))
	})

	// The self-zombie: the same worker re-claims the job
	// its stuck goroutine still runs. locked_by matches; only the attempt
	// fences the old goroutine out.
	t.Run("AttemptFencesTheSelfZombie", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertRow(t, b.pool, rowOpts{})
		first, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w", 1), ttl)
		require.NoError(t, err)
		second := reclaimAfterLapse(t, b, id, "w", ttl)
		require.EqualValues(t, 2, second.Attempt)

		stale := pulsetype.AttemptRef{ID: id, Attempt: first[0].Attempt}
		beats, err := b.store.Heartbeat(ctx, "w", []pulsetype.AttemptRef{stale}, time.Hour)
		require.NoError(t, err)
		require.False(t, beats[0].LeaseHeld)
		requireReportRefused(t, b, "w", pulsetype.Result{Ref: stale, Outcome: pulsetype.OutcomeFail, Error: "late"}, "stale", pulsetype.StatusRunning)

		acks, err := b.store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: id, Attempt: 2}, Outcome: pulsetype.OutcomeComplete}})
		require.NoError(t, err)
		require.True(t, acks[0].Accepted)
		job, err := b.store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pulsetype.StatusCompleted, job.Status)
		require.Len(t, job.Errors, 1, "only the reaped attempt is in the history")
		require.Equal(t, jobstore.LeaseExpiredError, job.Errors[0].Error)
	})
}

func TestOperatorActions(t *testing.T) {
	t.Parallel()

	t.Run("CancelsPendingJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertRow(t, b.pool, rowOpts{})
		job, err := b.store.Cancel(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pulsetype.StatusCanceled, job.Status)
		c, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w", 1), ttl)
		require.NoError(t, err)
		require.Empty(t, c)
	})

	t.Run("CancelOfARunningJobReachesItsHeartbeatAndRejectsItsReport", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertRow(t, b.pool, rowOpts{})
		c, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w", 1), ttl)
		require.NoError(t, err)
		_, err = b.store.Cancel(ctx, id)
		require.NoError(t, err)
		r := pulsetype.AttemptRef{ID: id, Attempt: c[0].Attempt}
		beats, err := b.store.Heartbeat(ctx, "w", []pulsetype.AttemptRef{r}, ttl)
		require.NoError(t, err)
		require.False(t, beats[0].LeaseHeld)
		require.True(t, beats[0].Canceled)
		requireReportRefused(t, b, "w", pulsetype.Result{Ref: r, Outcome: pulsetype.OutcomeComplete}, "CANCELED", pulsetype.StatusCanceled)
	})

	t.Run("CancelOfAFinishedJobIsAnInvalidTransition", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusCompleted, Attempts: 1})
		_, err := b.store.Cancel(ctx, id)
		require.ErrorIs(t, err, apierr.ErrInvalidTransition)
		require.Contains(t, err.Error(), "COMPLETED")
	})

	t.Run("UnknownJobIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.store.Cancel(ctx, uuid.Must(uuid.NewV7()))
		require.ErrorIs(t, err, apierr.ErrNotFound)
		_, err = b.store.Get(ctx, uuid.Must(uuid.NewV7()))
		require.ErrorIs(t, err, apierr.ErrNotFound)
	})

	t.Run("RetryOfADeadLetteredJobKeepsItsHistory", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertRow(t, b.pool, rowOpts{MaxAttempts: 1})
		c, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w", 1), ttl)
		require.NoError(t, err)
		_, err = b.store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: id, Attempt: c[0].Attempt}, Outcome: pulsetype.OutcomeFail, Error: "first"}})
		require.NoError(t, err)
		require.Equal(t, pulsetype.StatusDeadLettered, statusOf(t, b.pool, id))

		job, err := b.store.Retry(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pulsetype.StatusPending, job.Status)
		require.EqualValues(t, 0, job.Attempts)
		require.Len(t, job.Errors, 1)
		require.Nil(t, job.FinishedAt)
		again, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w", 1), ttl)
		require.NoError(t, err)
		require.Len(t, again, 1)
	})

	t.Run("RetryOfALiveJobIsAnInvalidTransition", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertRow(t, b.pool, rowOpts{})
		_, err := b.store.Retry(ctx, id)
		require.ErrorIs(t, err, apierr.ErrInvalidTransition)
		require.True(t, strings.Contains(err.Error(), "PENDING"))
	})
}

func TestList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []uuid.UUID
	for i := range 7 {
		topic := "a"
		if i%2 == 1 {
			topic = "b"
		}
		j := newJob(topic, 5)
		_, err := b.store.Insert(ctx, []pulsetype.NewJob{j})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	page1, err := b.store.List(ctx, jobstore.ListFilter{Topic: "a", Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[6], ids[4]}, []uuid.UUID{page1[0].ID, page1[1].ID})
	page2, err := b.store.List(ctx, jobstore.ListFilter{Topic: "a", Limit: 2, Before: &page1[1].ID})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[2], ids[0]}, []uuid.UUID{page2[0].ID, page2[1].ID})
	running, err := b.store.List(ctx, jobstore.ListFilter{Status: pulsetype.StatusRunning, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, running)
}
