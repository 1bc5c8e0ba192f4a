package jobstore_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// claimOne claims the one due job of topic for worker.
func claimOne(t *testing.T, store *jobstore.Store, topic, worker string) pulsetype.Claimed {
	t.Helper()
	got, err := store.Claim(ctx, []string{topic}, slots(worker, 1), time.Minute)
	require.NoError(t, err)
	require.Len(t, got, 1, "one job of %s is due", topic)
	return got[0]
}

func reportOne(t *testing.T, store *jobstore.Store, worker string, r pulsetype.Result) pulsetype.Ack {
	t.Helper()
	acks, err := store.Report(ctx, worker, []pulsetype.Result{r})
	require.NoError(t, err)
	require.Len(t, acks, 1)
	return acks[0]
}

func refOf(c pulsetype.Claimed) pulsetype.AttemptRef {
	return pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}
}

// A snooze gives the job back without spending an attempt, and the
// attempt number stays the fencing token: every claim gets a new one, and
// a report under a snoozed attempt's number changes nothing.
func TestSnoozeSpendsNoAttemptAndKeepsTheFence(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	setRetryPolicy(t, store, 0, 0) // retries come due at once
	job := newJob("snooze", 5)
	job.MaxAttempts = 2
	_, err := store.Insert(ctx, []pulsetype.NewJob{job})
	require.NoError(t, err)

	// Three snoozes: the job has been claimed three times and spent nothing.
	var last pulsetype.Claimed
	for i := int32(1); i <= 3; i++ {
		last = claimOne(t, store, "snooze", "w")
		require.Equal(t, i, last.Attempt, "every claim is a new attempt number")
		ack := reportOne(t, store, "w", pulsetype.Result{Ref: refOf(last), Outcome: pulsetype.OutcomeSnooze})
		require.True(t, ack.Accepted, ack.Reason)
		require.Equal(t, pulsetype.StatusPending, ack.Status)
	}
	got, err := store.Get(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, pulsetype.StatusPending, got.Status)
	require.EqualValues(t, 3, got.Attempts)
	require.EqualValues(t, 3, got.Snoozes)
	require.Empty(t, got.Errors, "a snooze is not a failure")

	// The snoozed attempt's worker reports again: fenced out.
	ack := reportOne(t, store, "w", pulsetype.Result{Ref: refOf(last), Outcome: pulsetype.OutcomeComplete})
	require.False(t, ack.Accepted)
	require.Contains(t, ack.Reason, "not RUNNING")

	// The budget is intact: two failures (attempts 4 and 5) to dead-letter.
	fourth := claimOne(t, store, "snooze", "w2")
	require.EqualValues(t, 4, fourth.Attempt)
	stale := reportOne(t, store, "w", pulsetype.Result{Ref: refOf(last), Outcome: pulsetype.OutcomeSnooze})
	require.False(t, stale.Accepted, "an old attempt cannot snooze the new lease")
	require.Contains(t, stale.Reason, "stale")
	ack = reportOne(t, store, "w2", pulsetype.Result{Ref: refOf(fourth), Outcome: pulsetype.OutcomeFail, Error: "one"})
	require.True(t, ack.Accepted, ack.Reason)
	require.Equal(t, pulsetype.StatusRetrying, ack.Status, "1 of 2 attempts spent")
	fifth := claimOne(t, store, "snooze", "w2")
	ack = reportOne(t, store, "w2", pulsetype.Result{Ref: refOf(fifth), Outcome: pulsetype.OutcomeFail, Error: "two"})
	require.True(t, ack.Accepted, ack.Reason)
	require.Equal(t, pulsetype.StatusDeadLettered, ack.Status, "2 of 2 attempts spent")
	got, err = store.Get(ctx, job.ID)
	require.NoError(t, err)
	require.Len(t, got.Errors, 2)
	require.EqualValues(t, 4, got.Errors[0].Attempt)
	require.EqualValues(t, 5, got.Errors[1].Attempt)

	// An operator retry grants a fresh budget: both counters start again.
	got, err = store.Retry(ctx, job.ID)
	require.NoError(t, err)
	require.Zero(t, got.Attempts)
	require.Zero(t, got.Snoozes)
}

// A snooze for d puts the job out of reach of the claim until d has
// passed, and a lapsed snoozed-then-claimed lease is budgeted like any.
func TestSnoozeWaitsItsDuration(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	job := newJob("snooze.later", 5)
	_, err := store.Insert(ctx, []pulsetype.NewJob{job})
	require.NoError(t, err)
	c := claimOne(t, store, "snooze.later", "w")
	ack := reportOne(t, store, "w", pulsetype.Result{Ref: refOf(c), Outcome: pulsetype.OutcomeSnooze, RetryAfter: time.Hour})
	require.True(t, ack.Accepted, ack.Reason)
	require.WithinDuration(t, time.Now().Add(time.Hour), ack.NextRunAt, 5*time.Minute)

	got, err := store.Claim(ctx, []string{"snooze.later"}, slots("w", 1), time.Minute)
	require.NoError(t, err)
	require.Empty(t, got, "a snoozed job is not due")
	wait, err := store.ExplainWait(ctx, mustGet(t, store, job.ID))
	require.NoError(t, err)
	require.Equal(t, jobstore.WaitSnoozed, wait.Reason, "a snoozed job says so, not scheduled")
	require.NotNil(t, wait.NotBefore)

	// The job is due again: a claim takes it as attempt 2.
	_, err = pool.Exec(ctx, `UPDATE jobs SET next_run_at = now() WHERE id = $1`, job.ID)
	require.NoError(t, err)
	require.EqualValues(t, 2, claimOne(t, store, "snooze.later", "w").Attempt)

	// A snooze is not a settled attempt: the throughput counts nothing.
	var n int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(completed + failed), 0) FROM job_throughput WHERE topic = 'snooze.later'`).Scan(&n))
	require.Zero(t, n)
}

func mustGet(t *testing.T, store *jobstore.Store, id uuid.UUID) *jobstore.Job {
	t.Helper()
	j, err := store.Get(ctx, id)
	require.NoError(t, err)
	return j
}

// The snooze rules of migration 00006, each broken in raw SQL and refused
// by Postgres with the rule's name.
func TestSchemaSnoozeFence(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	third := jobstoretest.Spec{Status: pulsetype.StatusRunning, Attempts: 3, MaxAttempts: 3, Worker: "w"}

	runRefusals(t, pool, []refusal{
		{"SnoozingAPendingJobIsRefused", pendingJob, `UPDATE jobs SET snoozes = snoozes + 1 WHERE id = $1`, "jobs_attempts_within_max"},
		{"CountingASnoozeOnARetryingJobIsRefused", retryingJob, `UPDATE jobs SET snoozes = snoozes + 1 WHERE id = $1`, "jobs_snooze_fence"},
		{"CountingASnoozeWhileRunningIsRefused", runningJob, `UPDATE jobs SET snoozes = snoozes + 1 WHERE id = $1`, "jobs_snooze_fence"},
		// Giving the attempt back by lowering attempts would hand the
		// next claim the snoozed lease's token.
		{"ASnoozeThatLowersAttemptsIsRefused", third,
			`UPDATE jobs SET status = 'PENDING', attempts = attempts - 1, lease_until = NULL WHERE id = $1`, "jobs_attempts_fence"},
		{"ASnoozeThatLowersAttemptsAndCountsIsRefused", third,
			`UPDATE jobs SET status = 'PENDING', attempts = attempts - 1, snoozes = snoozes + 1, lease_until = NULL WHERE id = $1`, "jobs_attempts_fence"},
		{"BackToPendingWithoutCountingASnoozeIsRefused", runningJob,
			`UPDATE jobs SET status = 'PENDING', lease_until = NULL WHERE id = $1`, "jobs_snooze_fence"},
		{"ASnoozeCountedTwiceIsRefused", third,
			`UPDATE jobs SET status = 'PENDING', snoozes = snoozes + 2, lease_until = NULL WHERE id = $1`, "jobs_snooze_fence"},
		{"SnoozingIntoRetryingIsRefused", third,
			`UPDATE jobs SET status = 'RETRYING', snoozes = snoozes + 1, lease_until = NULL WHERE id = $1`, "jobs_snooze_fence"},
		{"ASnoozeThatKeepsTheLeaseIsRefused", third,
			`UPDATE jobs SET status = 'PENDING', snoozes = snoozes + 1 WHERE id = $1`, "jobs_running_is_leased"},
		{"MoreSnoozesThanClaimsAreRefused", runningJob,
			`UPDATE jobs SET status = 'PENDING', snoozes = snoozes + 2, lease_until = NULL WHERE id = $1`, "jobs_attempts_within_max"},
		{"ASnoozeOfACompletedJobIsRefused", doneJob,
			`UPDATE jobs SET status = 'PENDING', snoozes = snoozes + 1, finished_at = NULL WHERE id = $1`, "jobs_status_transition"},
		{"ABirthWithSnoozesIsRefused", pendingJob,
			`INSERT INTO jobs (id, topic, snoozes) VALUES (gen_random_uuid(), 't', 1)`, "jobs_attempts_within_max"},
	})
	runPasses(t, pool, []refusal{
		{"ASnoozeOfTheLastAttemptPasses", third,
			`UPDATE jobs SET status = 'PENDING', snoozes = snoozes + 1, lease_until = NULL, next_run_at = now() + interval '1 hour' WHERE id = $1`, ""},
	})

	snoozed := func(t *testing.T, spec jobstoretest.Spec) uuid.UUID {
		t.Helper()
		id := jobstoretest.MustCreate(t, pool, spec)
		_, err := pool.Exec(ctx, `UPDATE jobs SET status = 'PENDING', snoozes = snoozes + 1, lease_until = NULL WHERE id = $1`, id)
		require.NoError(t, err)
		return id
	}
	t.Run("ForgettingASnoozeIsRefused", func(t *testing.T) {
		id := snoozed(t, runningJob)
		_, err := pool.Exec(ctx, `UPDATE jobs SET snoozes = 0 WHERE id = $1`, id)
		requireConstraint(t, err, "jobs_snooze_fence")
	})
	t.Run("TheNextClaimMustStillRaiseAttempts", func(t *testing.T) {
		id := snoozed(t, third)
		_, err := pool.Exec(ctx, `UPDATE jobs SET status = 'RUNNING', locked_by = 'w', lease_until = now() + interval '1 minute' WHERE id = $1`, id)
		requireConstraint(t, err, "jobs_attempts_fence")
		_, err = pool.Exec(ctx, `UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'w', lease_until = now() + interval '1 minute' WHERE id = $1`, id)
		require.NoError(t, err, "3 claims, 1 snoozed: the 4th claim is the 3rd attempt spent of 3")
	})
	t.Run("ARetryMustResetSnoozes", func(t *testing.T) {
		id := snoozed(t, third)
		_, err := pool.Exec(ctx, `UPDATE jobs SET status = 'CANCELED', finished_at = now() WHERE id = $1`, id)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE jobs SET status = 'PENDING', attempts = 0, finished_at = NULL WHERE id = $1`, id)
		requireConstraint(t, err, "jobs_attempts_within_max")
		_, err = pool.Exec(ctx, `UPDATE jobs SET status = 'PENDING', attempts = 0, snoozes = 0, finished_at = NULL WHERE id = $1`, id)
		require.NoError(t, err)
	})
}

// A snooze through the store is a legal path: it calls no guard function.
func TestSnoozeNeverEntersPLpgSQL(t *testing.T) {
	t.Parallel()
	pool, guardCalls := guardCallCounter(t)
	store := newStore(t, pool)
	_, err := store.Insert(ctx, []pulsetype.NewJob{newJob("snooze.cheap", 5)})
	require.NoError(t, err)
	c := claimOne(t, store, "snooze.cheap", "w")
	ack := reportOne(t, store, "w", pulsetype.Result{Ref: refOf(c), Outcome: pulsetype.OutcomeSnooze})
	require.True(t, ack.Accepted, ack.Reason)
	c = claimOne(t, store, "snooze.cheap", "w")
	ack = reportOne(t, store, "w", pulsetype.Result{Ref: refOf(c), Outcome: pulsetype.OutcomeComplete})
	require.True(t, ack.Accepted, ack.Reason)
	require.Zero(t, guardCalls(), "a legal snooze called a guard function")
}
