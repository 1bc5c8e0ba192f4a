package jobstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// handover is how long a locker holding the jobs table waits for the
// other to hold it too before it lets go.
const handover = 300 * time.Millisecond

// holdJobs takes the jobs table's ACCESS SHARE lock in a transaction that
// passed the gate, says so on mine, and commits once the other locker
// said the same on theirs (or after handover).
func holdJobs(ctx context.Context, pool *pgxpool.Pool, mine, theirs chan struct{}) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, jobstore.PinnedPlanSQL); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs LIMIT 1`); err != nil {
		return err
	}
	select {
	case <-theirs: // drop a stale signal: wait for the other's next hold
	default:
	}
	select {
	case mine <- struct{}{}:
	default:
	}
	select {
	case <-theirs:
	case <-time.After(handover):
	case <-ctx.Done():
	}
	return tx.Commit(ctx)
}

func TestQuietWindow(t *testing.T) {
	t.Parallel()

	t.Run("LetsAVacuumTruncateATableTheLifecycleKeepsLocked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Only the test's own vacuum: an autovacuum after the deletes
		// would make it wait.
		_, err := b.pool.Exec(ctx, `ALTER TABLE jobs SET (autovacuum_enabled = off)`)
		require.NoError(t, err)
		// Rows to keep first, then rows to delete at the table's end: once
		// they are gone, a vacuum wants to give the end back.
		_, err = b.pool.Exec(ctx, `
INSERT INTO jobs (id, topic, args)
SELECT gen_random_uuid(), CASE WHEN g <= 2000 THEN 'keep' ELSE 'tail' END, jsonb_build_object('pad', repeat('x', 200))
FROM generate_series(1, 30000) AS g`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE jobs SET status = 'CANCELED', finished_at = now() WHERE topic = 'tail'`)
		require.NoError(t, err)
		var deleted string
		require.NoError(t, b.pool.QueryRow(ctx, `WITH d AS (DELETE FROM jobs WHERE topic = 'tail' RETURNING 1)
SELECT pg_current_xact_id()::text FROM (SELECT count(*) FROM d) AS n`).Scan(&deleted))
		// A vacuum removes the deleted rows only once no snapshot of this
		// database is older than the delete, and a snapshot taken here
		// while another test's transaction in another database runs is
		// as old as that transaction: wait until none in the cluster is.
		require.Eventually(t, func() bool {
			var older bool
			require.NoError(t, b.pool.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                WHERE pid <> pg_backend_pid()
                  AND (age(backend_xmin) >= age($1::xid8::xid) OR age(backend_xid) >= age($1::xid8::xid)))`, deleted).Scan(&older))
			return !older
		}, time.Minute, 5*time.Millisecond, "a transaction older than the delete stayed open")
		var before int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT pg_relation_size('jobs')`).Scan(&before))

		// Two lockers pass the table's lock between them as a claim and a
		// report in flight do, in gated transactions: each lets go only
		// once the other holds it again, so without the window the table
		// is never free for the vacuum's tries. A locker that waits at a
		// closed gate lets the other go after a while (handover).
		run, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		held := [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
		for i := range 2 {
			wg.Go(func() {
				for run.Err() == nil {
					if err := holdJobs(run, b.pool, held[i], held[1-i]); err != nil && run.Err() == nil {
						t.Errorf("locker %d: %v", i, err)
						return
					}
				}
			})
		}
		defer func() { stop(); wg.Wait() }()

		vacuumed := make(chan error, 1)
		go func() { _, err := b.pool.Exec(ctx, `VACUUM jobs`); vacuumed <- err }()

		// The vacuum reaches its truncation phase and keeps trying for the
		// lock; the window lets one try succeed.
		require.Eventually(t, func() bool {
			yes, err := b.store.VacuumTruncating(ctx)
			require.NoError(t, err)
			return yes
		}, time.Minute, 5*time.Millisecond, "the vacuum never tried to truncate")
		w, err := b.store.QuietWindow(ctx, time.Second, 5*time.Second, 5*time.Millisecond)
		require.NoError(t, err)
		require.True(t, w.Closed, "the gate did not close: %+v", w)
		if !w.VacuumDone {
			rows, _ := b.pool.Query(ctx, `SELECT l.pid || ' ' || l.locktype || ' ' || l.mode || ' ' || l.granted || ' ' || coalesce(a.wait_event,'') || ': ' || coalesce(a.query, '') FROM pg_locks l LEFT JOIN pg_stat_activity a USING (pid) WHERE l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
			for rows.Next() {
				var s string
				_ = rows.Scan(&s)
				t.Log(s)
			}
		}
		require.True(t, w.VacuumDone, "the vacuum was still truncating when the window ended: %+v", w)
		require.NoError(t, <-vacuumed)

		var after int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT pg_relation_size('jobs')`).Scan(&after))
		// All of the end, or under load the part the vacuum truncated
		// before it yielded to a statement queued for the table and found
		// it taken again: without the window it keeps every page.
		require.Less(t, after, before, "the heap kept its end: %d bytes before the vacuum, %d after", before, after)
	})

	t.Run("GivesUpWithoutHarmWhenATransactionHoldsTheGate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, jobstore.PinnedPlanSQL)
		require.NoError(t, err)

		w, err := b.store.QuietWindow(ctx, 50*time.Millisecond, time.Second, 5*time.Millisecond)
		require.NoError(t, err)
		require.False(t, w.Closed, "the gate closed under a transaction holding it: %+v", w)

		// The holder goes on and commits; others pass the gate again.
		_, err = tx.Exec(ctx, `INSERT INTO jobs (id, topic) VALUES (gen_random_uuid(), 'held')`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, b.store.QueryGatedForTest(ctx, `SELECT 1 FROM jobs LIMIT 1`))
	})

	t.Run("HoldsBackGatedTransactionsUntilItOpens", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A window with no vacuum truncating opens at once: to watch it
		// closed, hold the gate as the window does, in a transaction.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+jobstore.JobsGateKey+`)`)
		require.NoError(t, err)

		done := make(chan error, 1)
		go func() { done <- b.store.QueryGatedForTest(ctx, `SELECT 1 FROM jobs LIMIT 1`) }()
		require.Eventually(t, func() bool {
			var waiting bool
			require.NoError(t, b.pool.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND mode = 'ShareLock'
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND (classid::bigint << 32 | objid::bigint) = `+jobstore.JobsGateKey+`)`).Scan(&waiting))
			return waiting
		}, time.Minute, 5*time.Millisecond, "the gated statement never waited at the gate")
		// It waits holding nothing of jobs, so a vacuum's try would find the table free.
		var onJobs []string
		rows, err := b.pool.Query(ctx, `
SELECT l.mode || ' by ' || coalesce(a.backend_type, '') || ': ' || coalesce(a.query, '')
FROM pg_locks l LEFT JOIN pg_stat_activity a USING (pid)
WHERE l.relation = 'jobs'::regclass AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			onJobs = append(onJobs, s)
		}
		require.NoError(t, rows.Err())
		require.Empty(t, onJobs, "a statement waiting at the gate holds a lock on jobs")
		select {
		case err := <-done:
			t.Fatalf("the gated statement ran through a closed gate (err %v)", err)
		default:
		}
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, <-done)
	})

	t.Run("WithNoVacuumTruncatingOpensAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w, err := b.store.QuietWindow(ctx, time.Second, 5*time.Second, 5*time.Millisecond)
		require.NoError(t, err)
		require.True(t, w.Closed)
		require.True(t, w.VacuumDone)
		yes, err := b.store.VacuumTruncating(ctx)
		require.NoError(t, err)
		require.False(t, yes)
		visible, err := b.store.QuietWindowVisible(ctx)
		require.NoError(t, err)
		require.True(t, visible, "the test cluster's superuser sees every vacuum")
	})

	t.Run("RefusesANonPositiveBound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, d := range [][3]time.Duration{{0, time.Second, time.Millisecond}, {time.Second, -1, time.Millisecond}, {time.Second, time.Second, 0}} {
			_, err := b.store.QuietWindow(ctx, d[0], d[1], d[2])
			require.ErrorContains(t, err, "must be positive")
		}
	})
}
