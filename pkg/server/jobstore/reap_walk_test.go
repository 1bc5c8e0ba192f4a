package jobstore_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// lapseLease moves a RUNNING job's lease to ago in the past.
func lapseLease(t *testing.T, b *testBundle, id uuid.UUID, ago time.Duration) {
	t.Helper()
	_, err := b.pool.Exec(ctx, `UPDATE jobs SET lease_until = now() - $2::bigint * interval '1 microsecond' WHERE id = $1`,
		id, ago.Microseconds())
	require.NoError(t, err)
}

func TestReapRecent(t *testing.T) {
	t.Parallel()

	t.Run("ReapsOnlyLeasesThatLapsedWithinTheSpan", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "test.topic", 5, 3)
		claimed, err := b.store.Claim(ctx, []string{"test.topic"}, slots("w", 3), ttl)
		require.NoError(t, err)
		require.Len(t, claimed, 3)
		recent, old, alive := claimed[0].ID, claimed[1].ID, claimed[2].ID
		lapseLease(t, b, recent, time.Second)
		lapseLease(t, b, old, time.Hour)

		reaped, err := b.store.ReapRecent(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, reaped, 1)
		require.Equal(t, recent, reaped[0].ID)
		require.Equal(t, pulsetype.StatusRunning, statusOf(t, b.pool, old), "a lease that lapsed before the span is not the recent walk's")
		require.Equal(t, pulsetype.StatusRunning, statusOf(t, b.pool, alive))

		reaped, err = b.store.Reap(ctx, 10)
		require.NoError(t, err)
		require.Len(t, reaped, 1, "the whole walk reaps whatever the recent one left")
		require.Equal(t, old, reaped[0].ID)
		require.Equal(t, pulsetype.StatusRunning, statusOf(t, b.pool, alive))
	})

	t.Run("RefusesASpanThatIsNotPositive", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, within := range []time.Duration{0, -time.Second} {
			_, err := b.store.ReapRecent(ctx, 10, within)
			require.ErrorContains(t, err, "not positive")
		}
	})

	// Why the recent walk exists (ADR-0067): while a snapshot older than
	// the jobs' runs stays open, Postgres cannot mark the finished jobs'
	// RUNNING entries in jobs_expired_lease_idx dead, and a walk from the
	// index's head visits every one of them to find nothing. Counted in
	// buffers, not timed.
	t.Run("AnOldSnapshotDoesNotLengthenTheRecentWalk", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 3000
		insertJobs(t, b, "old", 5, n)

		// Another session's snapshot, open from here to the end.
		held, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer held.Rollback(ctx) //nolint:errcheck // the rollback at the end of the test only releases the transaction
		_, err = held.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
		require.NoError(t, err)
		var seen int
		require.NoError(t, held.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&seen))

		// Every job runs, its lease lapses an hour ago, and it finishes:
		// n dead RUNNING entries at the index's head.
		claimed, err := b.store.Claim(ctx, []string{"old"}, slots("w", n), ttl)
		require.NoError(t, err)
		require.Len(t, claimed, n)
		_, err = b.pool.Exec(ctx, `UPDATE jobs SET lease_until = now() - interval '1 hour' WHERE status = 'RUNNING'`)
		require.NoError(t, err)
		complete(t, b, claimed)

		args := []any{100, "reaper-test"}
		whole := reapIndexBuffers(t, b, jobstore.ReapSQL, args...)
		recent := reapIndexBuffers(t, b, jobstore.ReapRecentSQL, append(args, time.Minute.Microseconds())...)
		t.Logf("jobs_expired_lease_idx walk over %d finished jobs under an old snapshot: %d buffers from the head, %d over the last minute", n, whole, recent)
		require.LessOrEqual(t, recent, 5, "the recent walk reads the index's last pages only")
		require.Greater(t, whole, 10*recent, "the test's premise: from the head, the walk visits every finished job's entry")
	})
}

// TestReapSettlesByPrimaryKey: a reap takes its batch from the head of
// jobs_expired_lease_idx and settles each job it took by a primary-key
// probe. Its settling UPDATE once matched the index's own predicate
// (status = 'RUNNING' AND lease_until < now()), and the planner read every
// lapsed lease into memory and compared each against the batch: a reap of
// 100 among 500 lapsed leases read all 500, so a fleet's mass expiry
// (a gateway's workers cut off) took time quadratic in its size.
func TestReapSettlesByPrimaryKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const queued, lapsed = 2000, 500
	insertJobs(t, b, "lapsed", 5, queued)
	claimed, err := b.store.Claim(ctx, []string{"lapsed"}, slots("w", lapsed), ttl)
	require.NoError(t, err)
	require.Len(t, claimed, lapsed)
	_, err = b.pool.Exec(ctx, `UPDATE jobs SET lease_until = now() - interval '1 second' WHERE status = 'RUNNING'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)

	args := []any{100, "reaper-test"}
	for name, buffers := range map[string]int{
		"whole":  reapIndexBuffers(t, b, jobstore.ReapSQL, args...),
		"recent": reapIndexBuffers(t, b, jobstore.ReapRecentSQL, append(args, time.Minute.Microseconds())...),
	} {
		t.Logf("%s reap of 100 among %d lapsed leases: %d buffers of jobs_expired_lease_idx", name, lapsed, buffers)
		require.LessOrEqual(t, buffers, 10, "%s: the reap reads its batch's entries, not every lapsed lease's", name)
	}

	for range lapsed / 100 {
		reaped, err := b.store.Reap(ctx, 100)
		require.NoError(t, err)
		require.Len(t, reaped, 100)
	}
	for _, c := range claimed {
		require.Equal(t, pulsetype.StatusRetrying, statusOf(t, b.pool, c.ID))
	}
}

// reapIndexBuffers is the buffers of sql's (a reap statement's) walk of
// jobs_expired_lease_idx. The plan must walk that index once: to pick the
// batch.
func reapIndexBuffers(t *testing.T, b *testBundle, sql string, args ...any) int {
	t.Helper()
	buffers, walks := indexWalkBuffers(t, b, sql, "jobs_expired_lease_idx", args...)
	require.Equal(t, 1, walks, "not one walk of jobs_expired_lease_idx")
	return buffers
}
