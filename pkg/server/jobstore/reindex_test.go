package jobstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
)

func openMaintenance(t *testing.T, store *jobstore.Store) *jobstore.IndexMaintenance {
	t.Helper()
	m, err := store.OpenIndexMaintenance(ctx, jobstore.ReindexLockTimeout)
	require.NoError(t, err)
	require.NotNil(t, m, "the reindex lock is free")
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

func sizeOf(t *testing.T, m *jobstore.IndexMaintenance, name string) jobstore.IndexSize {
	t.Helper()
	sizes, err := m.IndexSizes(ctx)
	require.NoError(t, err)
	for _, s := range sizes {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no index %s among %v", name, sizes)
	return jobstore.IndexSize{}
}

// invalidIndex leaves an invalid index called name on jobs, as a
// concurrent build that failed does: a unique index over a topic that
// several jobs share.
func invalidIndex(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	jobstoretest.MustCreate(t, pool, jobstoretest.Spec{Topic: "dup.topic"})
	jobstoretest.MustCreate(t, pool, jobstoretest.Spec{Topic: "dup.topic"})
	_, err := pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY `+name+` ON jobs (topic)`)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "the build fails: %v", err)
	require.Equal(t, "23505", pgErr.Code)
}

func indexValid(t *testing.T, pool *pgxpool.Pool, name string) (exists, valid bool) {
	t.Helper()
	err := pool.QueryRow(ctx, `SELECT true, indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`, name).Scan(&exists, &valid)
	if err != nil {
		return false, false
	}
	return exists, valid
}

// countedJobs inserts n queued jobs and has Postgres count them (VACUUM
// (ANALYZE)), as the reindexer's estimate reads them.
func countedJobs(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic) SELECT gen_random_uuid(), 'kept.topic' FROM generate_series(1, $1::int)`, n)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `VACUUM (ANALYZE) jobs`)
	require.NoError(t, err)
}

func TestIndexMaintenance(t *testing.T) {
	t.Parallel()

	t.Run("RebuildsABloatedIndexToAboutItsEstimatedSize", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 1000)
		m := openMaintenance(t, b.store)

		before := sizeOf(t, m, "jobs_pkey")
		require.InDelta(t, 1000, before.Entries, 1, "the vacuum counted the entries left")
		require.EqualValues(t, 16, before.KeyWidth, "a uuid")
		require.Greater(t, before.Bloat(), 4.0, "40 times the entries it holds were written: %+v", before)
		t.Logf("before %+v compact %d bloat %.1f", before, before.CompactBytes(), before.Bloat())

		after, err := m.Rebuild(ctx, before.Schema, before.Name)
		require.NoError(t, err)
		require.Less(t, after, before.Bytes/4)
		require.LessOrEqual(t, after, before.CompactBytes(), "the estimate errs large")
		require.Equal(t, after, sizeOf(t, m, "jobs_pkey").Bytes)

		exists, valid := indexValid(t, b.pool, "jobs_pkey")
		require.True(t, exists && valid, "the rebuilt index keeps the name and is valid")
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = 'bloat.topic'`).Scan(&n))
		require.Equal(t, 1000, n)
		_, err = b.pool.Exec(ctx, `INSERT INTO jobs (id, topic) SELECT id, 'bloat.topic' FROM jobs LIMIT 1`)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "the primary key still holds: %v", err)
		require.Equal(t, "23505", pgErr.Code)
		require.Equal(t, "jobs_pkey", pgErr.ConstraintName)
	})

	t.Run("AnIndexThatHoldsWhatItNeedsIsNotBloated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		countedJobs(t, b.pool, 20000)
		m := openMaintenance(t, b.store)
		s := sizeOf(t, m, "jobs_pkey")
		require.InDelta(t, 20000, s.Entries, 1)
		require.Less(t, s.Bloat(), 2.0, "%+v", s)
	})

	t.Run("AnIndexOfATableGrownSinceItsCountWithDeadVersionsWaitingIsNotBloated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		countedJobs(t, b.pool, 20000)
		// Six times the rows since the count, and 50,000 canceled and
		// deleted (100,000 dead versions no vacuum has removed, each with
		// its entry), in one transaction whose counts are flushed at its
		// commit, not up to a second later.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		for _, step := range []string{
			`INSERT INTO jobs (id, topic) SELECT gen_random_uuid(), 'kept.topic' FROM generate_series(1, 100000)`,
			`UPDATE jobs SET status = 'CANCELED', finished_at = now() WHERE id IN (SELECT id FROM jobs ORDER BY id LIMIT 50000)`,
			`DELETE FROM jobs WHERE status = 'CANCELED'`,
		} {
			_, err = tx.Exec(ctx, step)
			require.NoError(t, err)
		}
		_, err = tx.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		m := openMaintenance(t, b.store)
		s := sizeOf(t, m, "jobs_pkey")
		require.InDelta(t, 20000, s.Entries, 1, "counted before the rows came")
		var live, dead float64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass`).Scan(&live, &dead))
		require.Equal(t, [2]float64{live, dead}, [2]float64{s.TableLive, s.TableDead})
		require.Greater(t, live, 3*s.TableCounted, "%+v", s)
		require.Greater(t, dead, 40000.0, "%+v", s)
		require.Less(t, s.Bloat(), 2.0, "%+v", s)
		require.False(t, s.Partial)
		require.True(t, sizeOf(t, m, "jobs_claim_idx").Partial, "it holds only queued jobs")
	})

	t.Run("OneSessionAtATime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := openMaintenance(t, b.store)
		second, err := b.store.OpenIndexMaintenance(ctx, jobstore.ReindexLockTimeout)
		require.NoError(t, err)
		require.Nil(t, second, "the lock is held")

		require.NoError(t, first.Close(ctx))
		third := openMaintenance(t, b.store)
		require.NotNil(t, third, "closing the session released it")
	})

	t.Run("RebuildsInOneProcessWithinItsTimeouts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		m := openMaintenance(t, b.store)
		for name, want := range map[string]string{
			// Postgres builds with a parallel worker otherwise: a core
			// taken from the queue.
			"max_parallel_maintenance_workers": "0",
			"lock_timeout":                     "1min",
			"statement_timeout":                "1h",
		} {
			got, err := jobstore.MaintenanceSetting(ctx, m, name)
			require.NoError(t, err)
			require.Equal(t, want, got, name)
		}
	})

	t.Run("DropsOnlyWhatFailedRebuildsLeave", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		invalidIndex(t, b.pool, "jobs_pkey_ccnew")
		invalidIndex(t, b.pool, "jobs_finished_idx_ccold1")
		invalidIndex(t, b.pool, "jobs_operator_probe") // an operator's own failed build
		_, err := b.pool.Exec(ctx, `CREATE INDEX jobs_priority_ccold ON jobs (priority)`)
		require.NoError(t, err)
		m := openMaintenance(t, b.store)

		dropped, err := m.DropLeftovers(ctx)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"jobs_pkey_ccnew", "jobs_finished_idx_ccold1"}, dropped)
		for name, want := range map[string]bool{"jobs_pkey_ccnew": false, "jobs_finished_idx_ccold1": false, "jobs_operator_probe": true, "jobs_priority_ccold": true} {
			exists, _ := indexValid(t, b.pool, name)
			require.Equal(t, want, exists, name)
		}
		dropped, err = m.DropLeftovers(ctx)
		require.NoError(t, err)
		require.Empty(t, dropped)
	})

	t.Run("SeesAnOpenSnapshot", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		m := openMaintenance(t, b.store)
		o, err := m.Obstacle(ctx)
		require.NoError(t, err)
		require.False(t, o.Vacuum)
		require.Zero(t, o.Snapshot, "nothing else is open")
		vacuums := o.Vacuums

		release := jobstoretest.HoldSnapshot(t, b.pool)
		o, err = m.Obstacle(ctx)
		require.NoError(t, err)
		require.False(t, o.Vacuum)
		require.Positive(t, o.Snapshot)
		open := o.Snapshot

		release()
		o, err = m.Obstacle(ctx)
		require.NoError(t, err)
		require.Zero(t, o.Snapshot, "it ended (it was open %s)", open)

		// A vacuum of the table counts once it has ended.
		_, err = b.pool.Exec(ctx, `VACUUM jobs`)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			o, err = m.Obstacle(ctx)
			require.NoError(t, err)
			return o.Vacuums == vacuums+1
		}, 10*time.Second, 5*time.Millisecond, "the vacuum was not counted: %+v", o)
	})

	t.Run("SeesAVacuumOfTheTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.pool.Exec(ctx, `INSERT INTO jobs (id, topic) SELECT gen_random_uuid(), 'vacuum.topic' FROM generate_series(1, 20000)`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE jobs SET status = 'CANCELED', finished_at = now()`)
		require.NoError(t, err)
		m := openMaintenance(t, b.store)
		o, err := m.Obstacle(ctx)
		require.NoError(t, err)
		var heap int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT pg_relation_size('jobs')`).Scan(&heap))
		require.Greater(t, heap, int64(1<<20), "twenty thousand rows, twice")
		require.Equal(t, heap, o.Heap)

		stop := jobstoretest.SlowVacuum(t, b.pool)
		o, err = m.Obstacle(ctx)
		require.NoError(t, err)
		require.True(t, o.Vacuum)
		stop()
		o, err = m.Obstacle(ctx)
		require.NoError(t, err)
		require.False(t, o.Vacuum)
	})

	t.Run("RefusesAnythingButAnIndexOfJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		m := openMaintenance(t, b.store)
		for _, name := range []string{"schedules_pkey", "jobs", "jobs_pkey; DROP TABLE jobs", "jobs_pkey\x00", "no_such_index", "\xff\xfe"} {
			_, err := m.Rebuild(ctx, "public", name)
			require.ErrorContains(t, err, "not an index of the jobs table", "%q", name)
		}
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n), "jobs is still there")
	})
}

func TestIndexSizeEstimate(t *testing.T) {
	t.Parallel()
	unknown := jobstore.IndexSize{Bytes: 1 << 20, Entries: -1, KeyWidth: 16}
	require.Zero(t, unknown.CompactBytes())
	require.Zero(t, unknown.Bloat(), "no entries counted: no judgement")

	empty := jobstore.IndexSize{Bytes: 16384, Entries: 0, KeyWidth: 16}
	require.EqualValues(t, 2*8192, empty.CompactBytes(), "a metapage and a root")
	require.InDelta(t, 1.0, empty.Bloat(), 0.001)

	// 28 bytes an entry (8 of header, the uuid, 4 of line pointer) on
	// 7,336.8 usable bytes a leaf: 262 entries a leaf.
	million := jobstore.IndexSize{Bytes: 1 << 30, Entries: 1e6, KeyWidth: 16}
	require.InDelta(t, (3817*1.01+1)*8192, float64(million.CompactBytes()), 2*8192)
	wider := million
	wider.KeyWidth = 17 // padded to 24
	require.Greater(t, wider.CompactBytes(), million.CompactBytes())

	// Counted at a million rows, the table now three: three times the
	// entries. Never fewer than counted (statistics discarded after a
	// crash count live rows from zero), nor grown when never counted.
	grown := million
	grown.TableCounted, grown.TableLive = 1e6, 3e6
	require.InEpsilon(t, 3*float64(million.CompactBytes()), float64(grown.CompactBytes()), 0.001)
	for _, table := range [][2]float64{{1e6, 0}, {1e6, 5e5}, {-1, 3e6}, {0, 3e6}} {
		other := million
		other.TableCounted, other.TableLive = table[0], table[1]
		require.Equal(t, million.CompactBytes(), other.CompactBytes(), "counted %v, live %v", table[0], table[1])
	}

	// Two million dead versions waiting for a vacuum: an entry each.
	dead := grown
	dead.TableDead = 2e6
	require.InEpsilon(t, 5*float64(million.CompactBytes()), float64(dead.CompactBytes()), 0.001)

	// A partial index is given none of them (which versions it matched is
	// not known), but grows with the table.
	partial := jobstore.IndexSize{Entries: 1e3, KeyWidth: 16, TableCounted: 1e6, TableLive: 2e6, TableDead: 2e6, Partial: true}
	require.Equal(t, jobstore.IndexSize{Entries: 2e3, KeyWidth: 16}.CompactBytes(), partial.CompactBytes())
}
