package jobstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// TestRetryPolicy: the retry_policy row is the one policy. Changing it
// changes the wait of the next failure settled, reported by a worker or
// reaped after its lease lapsed, with no service told anything.
func TestRetryPolicy(t *testing.T) {
	t.Parallel()

	t.Run("DefaultIsAttemptsSquaredSecondsCappedAtAnHour", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p, err := b.store.RetryPolicy(ctx)
		require.NoError(t, err)
		require.True(t, p.Same(jobstore.DefaultRetryPolicy), "%+v", p)
		require.Equal(t, "migration 00007", p.UpdatedBy)
	})

	t.Run("ReportAndReapHonourTheRowAsItChanges", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reported := insertRow(t, b.pool, rowOpts{MaxAttempts: 10, Topic: "reported"})
		reaped := insertRow(t, b.pool, rowOpts{MaxAttempts: 10, Topic: "reaped"})

		// fail fails attempt n of both jobs, one by a report and one by
		// the reaper, and returns when each may run again.
		fail := func() (report, reap time.Time) {
			t.Helper()
			c, err := b.store.Claim(ctx, []string{"reported", "reaped"}, slots("w", 2), ttl)
			require.NoError(t, err)
			require.Len(t, c, 2)
			for _, cl := range c {
				if cl.ID == reaped {
					expireLease(t, b.pool, reaped)
					continue
				}
				acks, err := b.store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: cl.ID, Attempt: cl.Attempt}, Outcome: pulsetype.OutcomeFail, Error: "boom"}})
				require.NoError(t, err)
				require.True(t, acks[0].Accepted, acks[0].Reason)
				require.Equal(t, pulsetype.StatusRetrying, acks[0].Status)
			}
			rs, err := b.store.Reap(ctx, 10)
			require.NoError(t, err)
			require.Len(t, rs, 1)
			require.Equal(t, pulsetype.StatusRetrying, rs[0].Status)
			return nextRunAt(t, b, reported), nextRunAt(t, b, reaped)
		}
		due := func() {
			t.Helper()
			makeDue(t, b.pool, reported)
			makeDue(t, b.pool, reaped)
		}

		// Attempt 1 under the default: 1² × 1s.
		before := time.Now()
		report, reap := fail()
		require.WithinDuration(t, before.Add(time.Second), report, 2*time.Second)
		require.WithinDuration(t, before.Add(time.Second), reap, 2*time.Second)
		due()

		// Attempt 2 after an operator's UPDATE: 2² × 1m.
		_, err := b.pool.Exec(ctx, `UPDATE retry_policy SET backoff_unit = '1 minute', backoff_max = '1 day'`)
		require.NoError(t, err)
		before = time.Now()
		report, reap = fail()
		require.WithinDuration(t, before.Add(4*time.Minute), report, 5*time.Second)
		require.WithinDuration(t, before.Add(4*time.Minute), reap, 5*time.Second)
		due()

		// Attempt 3 after a service set it: 3² × 1h capped at 2h.
		setRetryPolicy(t, b.store, time.Hour, 2*time.Hour)
		before = time.Now()
		report, reap = fail()
		require.WithinDuration(t, before.Add(2*time.Hour), report, 5*time.Second)
		require.WithinDuration(t, before.Add(2*time.Hour), reap, 5*time.Second)
	})

	t.Run("SetReturnsTheRowBeforeAndAfterAndKeepsWhatItIsNotGiven", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		unit := 10 * time.Millisecond
		before, after, err := b.store.SetRetryPolicy(ctx, &unit, nil, "dispatch-gateway gw-1")
		require.NoError(t, err)
		require.True(t, before.Same(jobstore.DefaultRetryPolicy))
		require.Equal(t, jobstore.RetryPolicy{Unit: unit, Max: time.Hour}, jobstore.RetryPolicy{Unit: after.Unit, Max: after.Max})
		require.Equal(t, "dispatch-gateway gw-1", after.UpdatedBy)

		// An UPDATE by hand names its client.
		_, err = b.pool.Exec(ctx, `UPDATE retry_policy SET backoff_max = '2 hours'`)
		require.NoError(t, err)
		p, err := b.store.RetryPolicy(ctx)
		require.NoError(t, err)
		require.Equal(t, 2*time.Hour, p.Max)
		require.Contains(t, p.UpdatedBy, " as ")
		require.True(t, p.UpdatedAt.After(after.UpdatedAt) || p.UpdatedAt.Equal(after.UpdatedAt))
	})

	t.Run("TheSchemaRefusesABadPolicyAndKeepsItsRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		neg, tiny, huge := -time.Second, time.Millisecond, 31*24*time.Hour
		_, _, err := b.store.SetRetryPolicy(ctx, &neg, nil, "test")
		require.ErrorContains(t, err, "retry_policy_unit_range")
		_, _, err = b.store.SetRetryPolicy(ctx, nil, &tiny, "test") // below the unit (1s)
		require.ErrorContains(t, err, "retry_policy_max_range")
		_, _, err = b.store.SetRetryPolicy(ctx, nil, &huge, "test")
		require.ErrorContains(t, err, "retry_policy_max_range")
		for _, stmt := range []string{`DELETE FROM retry_policy`, `TRUNCATE retry_policy`, `INSERT INTO retry_policy (id) VALUES (false)`} {
			_, err = b.pool.Exec(ctx, stmt)
			require.Error(t, err, stmt)
		}
		p, err := b.store.RetryPolicy(ctx)
		require.NoError(t, err)
		require.True(t, p.Same(jobstore.DefaultRetryPolicy))
	})

	t.Run("DelayMatchesTheSchemaFunction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := jobstore.RetryPolicy{Unit: 1500 * time.Millisecond, Max: time.Minute}
		setRetryPolicy(t, b.store, p.Unit, p.Max)
		for _, n := range []int{1, 2, 3, 6, 7, 25} {
			var micros int64
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT (extract(epoch FROM pulse_retry_delay($1)) * 1000000)::bigint`, n).Scan(&micros))
			require.Equal(t, p.Delay(n), time.Duration(micros)*time.Microsecond, "attempt %d", n)
		}
		// An explicit base and cap (a per-job policy) override the row.
		var micros int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT (extract(epoch FROM pulse_retry_delay(3, '1 second', '5 seconds')) * 1000000)::bigint`).Scan(&micros))
		require.Equal(t, 5*time.Second, time.Duration(micros)*time.Microsecond)
	})
}

func nextRunAt(t *testing.T, b *testBundle, id any) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT next_run_at FROM jobs WHERE id = $1`, id).Scan(&at))
	return at
}

// TestRetryDelayIsInlinedAndThePolicyReadOncePerStatement: the report and
// the reap cost what the formula written out cost (ADR-0013). Postgres
// inlines pulse_retry_delay into each statement, so no function is called
// per row, and reads retry_policy in two InitPlans, once per statement.
func TestRetryDelayIsInlinedAndThePolicyReadOncePerStatement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"report": {jobstore.ReportSQL, []any{[]string{"w"}, []uuid.UUID{uuid.New()}, []int32{1}, []int16{2}, []string{"boom"}, []int64{0}, [][]byte{nil}, "gw-1"}},
		"reap":   {jobstore.ReapSQL, []any{10, "reaper-1"}},
	} {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, jobstore.PinnedPlanSQL)
		require.NoError(t, err)
		rows, err := tx.Query(ctx, "EXPLAIN (VERBOSE) "+q.sql, q.args...)
		require.NoError(t, err)
		var lines []string
		for rows.Next() {
			var l string
			require.NoError(t, rows.Scan(&l))
			lines = append(lines, l)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, tx.Rollback(ctx))
		text := strings.Join(lines, "\n")
		require.NotContains(t, text, "pulse_retry_delay(", "%s: the function was not inlined:\n%s", name, text)
		// Two scans of the one-row table, each an InitPlan's (the report
		// has a third InitPlan, its wake of limited topics, ADR-0024).
		require.Equal(t, 2, strings.Count(text, "Scan on public.retry_policy"), "%s: the policy is not read once per statement:\n%s", name, text)
		require.GreaterOrEqual(t, strings.Count(text, "InitPlan"), 2, "%s: the policy is not read in InitPlans:\n%s", name, text)
		require.NotContains(t, text, "SubPlan", "%s: a subquery runs per row:\n%s", name, text)
	}
}
