package jobstore_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// insertWithRetry inserts one job of topic with policy p and maxAttempts.
func insertWithRetry(t *testing.T, store *jobstore.Store, topic string, maxAttempts int32, p pulsetype.JobRetry) uuid.UUID {
	t.Helper()
	j := newJob(topic, 5)
	j.MaxAttempts, j.Retry = maxAttempts, p
	_, err := store.Insert(ctx, []pulsetype.NewJob{j})
	require.NoError(t, err)
	return j.ID
}

// lastWait is how long the job's last failure made it wait: next_run_at
// less the moment of the failure, which the settling statement stamps on
// its error entry with the same now(). No clock of the test's is read.
func lastWait(t *testing.T, b *testBundle, id uuid.UUID) time.Duration {
	t.Helper()
	var micros int64
	require.NoError(t, b.pool.QueryRow(ctx, `
		SELECT (extract(epoch FROM next_run_at - (errors->-1->>'at')::timestamptz) * 1000000)::bigint
		FROM jobs WHERE id = $1`, id).Scan(&micros))
	return time.Duration(micros) * time.Microsecond
}

// failAttempt claims the job of topic and fails the attempt, by a report
// (reaped false) or by letting its lease lapse for the reaper (reaped
// true), and returns the job's status after it.
func failAttempt(t *testing.T, b *testBundle, topic string, reaped bool, retryAfter time.Duration) pulsetype.Status {
	t.Helper()
	c, err := b.store.Claim(ctx, []string{topic}, slots("w", 1), ttl)
	require.NoError(t, err)
	require.Len(t, c, 1)
	if reaped {
		expireLease(t, b.pool, c[0].ID)
		rs, err := b.store.Reap(ctx, 10)
		require.NoError(t, err)
		require.Len(t, rs, 1)
		return rs[0].Status
	}
	acks, err := b.store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: c[0].ID, Attempt: c[0].Attempt},
		Outcome: pulsetype.OutcomeFail, Error: "boom", RetryAfter: retryAfter}})
	require.NoError(t, err)
	require.True(t, acks[0].Accepted, acks[0].Reason)
	return acks[0].Status
}

// TestJobRetryPolicy: a job's own backoff, exponential with jitter or
// fixed, schedules its retries whether a worker reported the failure or
// the reaper found its lease lapsed: one formula, pulse_retry_delay.
func TestJobRetryPolicy(t *testing.T) {
	t.Parallel()

	for _, how := range []struct {
		name   string
		reaped bool
	}{{"Reported", false}, {"Reaped", true}} {
		t.Run("ExponentialStaysWithinItsJitterAndCap"+how.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			p := pulsetype.JobRetry{Base: 2 * time.Second, Max: 20 * time.Second}
			id := insertWithRetry(t, b.store, "exp", 9, p)
			for n := 1; n <= 8; n++ {
				require.Equal(t, pulsetype.StatusRetrying, failAttempt(t, b, "exp", how.reaped, 0))
				ceiling := min(p.Base<<(n-1), p.Max)
				got := lastWait(t, b, id)
				require.LessOrEqual(t, got, ceiling, "attempt %d", n)
				require.GreaterOrEqual(t, got, ceiling*4/5, "attempt %d", n)
				makeDue(t, b.pool, id)
			}
			// The ninth failure is the last attempt: dead-lettered.
			require.Equal(t, pulsetype.StatusDeadLettered, failAttempt(t, b, "exp", how.reaped, 0))
		})

		t.Run("ExponentialWithoutMaxStopsAtThePolicyRowsCap"+how.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			setRetryPolicy(t, b.store, time.Second, 90*time.Second)
			id := insertWithRetry(t, b.store, "exp", 10, pulsetype.JobRetry{Base: time.Minute})
			for n := 1; n <= 3; n++ {
				require.Equal(t, pulsetype.StatusRetrying, failAttempt(t, b, "exp", how.reaped, 0))
				ceiling := min(time.Minute<<(n-1), 90*time.Second)
				got := lastWait(t, b, id)
				require.LessOrEqual(t, got, ceiling, "attempt %d", n)
				require.GreaterOrEqual(t, got, ceiling*4/5, "attempt %d", n)
				makeDue(t, b.pool, id)
			}
		})

		t.Run("FixedIsExact"+how.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := insertWithRetry(t, b.store, "fixed", 5, pulsetype.JobRetry{Fixed: 1500 * time.Millisecond})
			for n := 1; n <= 4; n++ {
				require.Equal(t, pulsetype.StatusRetrying, failAttempt(t, b, "fixed", how.reaped, 0))
				require.Equal(t, 1500*time.Millisecond, lastWait(t, b, id), "attempt %d", n)
				makeDue(t, b.pool, id)
			}
		})

		t.Run("WithoutAPolicyTheRowStillApplies"+how.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			setRetryPolicy(t, b.store, 3*time.Second, time.Hour)
			id := insertWithRetry(t, b.store, "row", 5, pulsetype.JobRetry{})
			for n := 1; n <= 3; n++ {
				require.Equal(t, pulsetype.StatusRetrying, failAttempt(t, b, "row", how.reaped, 0))
				require.Equal(t, time.Duration(n*n)*3*time.Second, lastWait(t, b, id), "attempt %d", n)
				makeDue(t, b.pool, id)
			}
		})
	}

	t.Run("RetryAfterWinsOverTheBackoffAndUsesAnAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertWithRetry(t, b.store, "snooze", 2, pulsetype.JobRetry{Fixed: 5 * time.Second})
		require.Equal(t, pulsetype.StatusRetrying, failAttempt(t, b, "snooze", false, 45*time.Second))
		require.Equal(t, 45*time.Second, lastWait(t, b, id))
		var attempts int32
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT attempts FROM jobs WHERE id = $1`, id).Scan(&attempts))
		require.Equal(t, int32(1), attempts)
		makeDue(t, b.pool, id)
		// On the last attempt there is no next one to wait for.
		require.Equal(t, pulsetype.StatusDeadLettered, failAttempt(t, b, "snooze", false, 45*time.Second))
	})

	t.Run("RetryAfterOnAJobWithoutAPolicy", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertWithRetry(t, b.store, "snooze", 3, pulsetype.JobRetry{})
		require.Equal(t, pulsetype.StatusRetrying, failAttempt(t, b, "snooze", false, 1500*time.Millisecond))
		require.Equal(t, 1500*time.Millisecond, lastWait(t, b, id))
	})

	t.Run("TheFunctionNeverOverflows", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// 2^99 × 366 days does not fit an interval; the cap is applied first.
		var micros int64
		require.NoError(t, b.pool.QueryRow(ctx, `
			SELECT (extract(epoch FROM pulse_retry_delay(100, NULL, NULL, '366 days', '366 days', NULL)) * 1000000)::bigint`).Scan(&micros))
		got := time.Duration(micros) * time.Microsecond
		require.LessOrEqual(t, got, 366*24*time.Hour)
		require.GreaterOrEqual(t, got, 366*24*time.Hour*4/5)
		// The 00007 form is the same formula without a job policy.
		require.NoError(t, b.pool.QueryRow(ctx, `
			SELECT (extract(epoch FROM pulse_retry_delay(3, '1 second', '1 hour')) * 1000000)::bigint`).Scan(&micros))
		require.Equal(t, 9*time.Second, time.Duration(micros)*time.Microsecond)
	})

	t.Run("StoredAndReadBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range []pulsetype.JobRetry{
			{Base: 2 * time.Second, Max: 10 * time.Minute},
			{Base: time.Millisecond},
			{Fixed: 30 * time.Second},
			{},
		} {
			id := insertWithRetry(t, b.store, "read", 3, p)
			j, err := b.store.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, p, j.Retry)
		}
	})

	t.Run("InsertOneStoresIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		j := newJob("tx", 5)
		j.Retry = pulsetype.JobRetry{Fixed: 90 * time.Second}
		_, err = jobstore.InsertOne(ctx, txQueryer{tx}, j)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		got, err := b.store.Get(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, j.Retry, got.Retry)
	})

	t.Run("TheSchemaRefusesABadPolicyNamingRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for name, p := range map[string]pulsetype.JobRetry{
			"both forms":    {Base: time.Second, Fixed: time.Second},
			"max and fixed": {Max: time.Second, Fixed: time.Second},
			"max alone":     {Max: time.Second},
			"max below":     {Base: time.Minute, Max: time.Second},
			"negative":      {Fixed: -time.Second},
			"sub-ms":        {Base: time.Microsecond},
			"past 366d":     {Fixed: 367 * 24 * time.Hour},
			"max past 366d": {Base: time.Second, Max: 367 * 24 * time.Hour},
		} {
			j := newJob("bad", 5)
			j.Retry = p
			_, err := b.store.Insert(ctx, []pulsetype.NewJob{j})
			require.Error(t, err, name)
			require.Equal(t, apierr.KindInvalidArgument, apierr.KindOf(err), "%s: %v", name, err)
			require.Contains(t, err.Error(), "retry", name)
		}
		require.Zero(t, countJobs(t, b.pool))
	})

	t.Run("ThePolicyIsImmutable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := insertWithRetry(t, b.store, "frozen", 3, pulsetype.JobRetry{Base: time.Second, Max: time.Minute})
		for _, stmt := range []string{
			`UPDATE jobs SET retry_base = '2 seconds' WHERE id = $1`,
			`UPDATE jobs SET retry_max = NULL WHERE id = $1`,
			`UPDATE jobs SET retry_base = NULL, retry_max = NULL, retry_fixed = '1 second' WHERE id = $1`,
		} {
			_, err := b.pool.Exec(ctx, stmt, id)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, stmt)
			require.Equal(t, "jobs_identity_immutable", pgErr.ConstraintName, stmt)
			require.Contains(t, pgErr.Message, "retry_", stmt)
		}
		// Nor does the job's timeout, the other part of its submitted spec.
		_, err := b.pool.Exec(ctx, `UPDATE jobs SET timeout = '5 seconds' WHERE id = $1`, id)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "jobs_identity_immutable", pgErr.ConstraintName)
		require.Contains(t, pgErr.Message, "timeout")
		// Assigning the same values is no change.
		_, err = b.pool.Exec(ctx, `UPDATE jobs SET retry_base = retry_base, retry_max = retry_max, timeout = timeout WHERE id = $1`, id)
		require.NoError(t, err)
		j, err := b.store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pulsetype.JobRetry{Base: time.Second, Max: time.Minute}, j.Retry)
	})
}
