package reindex_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/reaper/internal/config"
	"github.com/pulsequeue/pulse/services/reaper/internal/reindex"
)

var ctx = context.Background()

type testBundle struct {
	pool     *pgxpool.Pool
	store    *jobstore.Store
	observer *recorder
	r        *reindex.Reindexer
}

// recorder keeps what the reindexer told its observer.
type recorder struct {
	mu        sync.Mutex
	sizes     map[string]jobstore.IndexSize
	reindexed map[string][]error
}

func (o *recorder) IndexSizes(sizes []jobstore.IndexSize) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range sizes {
		o.sizes[s.Name] = s
	}
}

func (o *recorder) Reindexed(index string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reindexed[index] = append(o.reindexed[index], err)
}

func setup(t *testing.T, cfg reindex.Config) *testBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	store := jobstore.New(pool)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	o := &recorder{sizes: map[string]jobstore.IndexSize{}, reindexed: map[string][]error{}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &testBundle{pool: pool, store: store, observer: o,
		r: reindex.NewReindexer(cfg, reindex.StoreOpener(store, jobstore.ReindexLockTimeout), reindex.StoreWatcher(store), o, logger)}
}

// defaults is the reaper's configuration (config.ReindexBloatDefault) with a
// floor of 1 MiB, since a test's table is small.
var defaults = reindex.Config{Bloat: config.ReindexBloatDefault, MinFreed: 1 << 20,
	OldestSnapshot: reindex.OldestSnapshot, VacuumWait: reindex.VacuumWait}

func indexBytes(t *testing.T, pool *pgxpool.Pool, name string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_relation_size(to_regclass($1))`, name).Scan(&n))
	return n
}

func heapBytes(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_relation_size('jobs')`).Scan(&n))
	return n
}

// requireRebuiltAfterAVacuum vacuums jobs and requires that a pass then
// rebuilds jobs_pkey, once Postgres's statistics show the vacuum ended.
func requireRebuiltAfterAVacuum(t *testing.T, b *testBundle) {
	t.Helper()
	_, err := b.pool.Exec(ctx, `VACUUM jobs`)
	require.NoError(t, err)
	var res reindex.Result
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		res, err = b.r.Pass(ctx)
		require.NoError(c, err)
		assert.Empty(c, res.Postponed, "still postponed")
	}, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, res.Rebuilt, "jobs_pkey")
}

func TestReindexer(t *testing.T) {
	t.Parallel()

	t.Run("RebuildsTheBloatedIndexesOnceAndLeavesTheRest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, defaults)
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
		pkey := indexBytes(t, b.pool, "jobs_pkey")
		finished := indexBytes(t, b.pool, "jobs_workflow_idx") // nothing in it: never bloated

		res, err := b.r.Pass(ctx)
		require.NoError(t, err)
		require.Contains(t, res.Rebuilt, "jobs_pkey")
		require.Contains(t, res.Rebuilt, "jobs_claim_idx", "every pending job went through it")
		require.NotContains(t, res.Rebuilt, "jobs_workflow_idx")
		require.Empty(t, res.Postponed)
		require.Less(t, indexBytes(t, b.pool, "jobs_pkey"), pkey/4)
		require.Equal(t, finished, indexBytes(t, b.pool, "jobs_workflow_idx"))
		for _, name := range res.Rebuilt {
			require.Equal(t, []error{nil}, b.observer.reindexed[name], name)
			require.GreaterOrEqual(t, b.observer.sizes[name].Bloat(), config.ReindexBloatDefault, name)
		}
		// The claim index is partial, and goes after jobs_pkey (due).
		require.True(t, b.observer.sizes["jobs_claim_idx"].Partial)
		require.False(t, b.observer.sizes["jobs_pkey"].Partial)
		require.Less(t, slices.Index(res.Rebuilt, "jobs_pkey"), slices.Index(res.Rebuilt, "jobs_claim_idx"))

		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Rebuilt, "nothing is bloated any more")
	})

	t.Run("ARebuiltIndexIsRebuiltAgainWithinTheHourOnlyOnceItHasDoubled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, defaults)
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
		res, err := b.r.Pass(ctx)
		require.NoError(t, err)
		require.Contains(t, res.Rebuilt, "jobs_pkey")
		first := b.observer.sizes["jobs_pkey"].Bytes

		// Bloated again past the thresholds, but not to twice the size it
		// was rebuilt at: an index that churns back to its working size.
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		again := b.observer.sizes["jobs_pkey"]
		require.GreaterOrEqual(t, again.Bloat(), config.ReindexBloatDefault)
		require.GreaterOrEqual(t, again.Bytes-again.CompactBytes(), defaults.MinFreed)
		require.Less(t, float64(again.Bytes), reindex.Regrowth*float64(first))
		require.NotContains(t, res.Rebuilt, "jobs_pkey", "rebuilt within the hour, and no larger than it was")

		// A long snapshot's growth: past twice its size at the rebuild.
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 200000, 500)
		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, float64(b.observer.sizes["jobs_pkey"].Bytes), reindex.Regrowth*float64(first))
		require.Contains(t, res.Rebuilt, "jobs_pkey")
	})

	t.Run("AnIndexBelowTheFloorIsLeftAlone", func(t *testing.T) {
		t.Parallel()
		cfg := defaults
		cfg.MinFreed = 1 << 30
		b := setup(t, cfg)
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
		res, err := b.r.Pass(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Rebuilt)
		require.Greater(t, b.observer.sizes["jobs_pkey"].Bloat(), config.ReindexBloatDefault, "bloated, but would give back too little")
	})

	t.Run("WaitsOutAnOldSnapshot", func(t *testing.T) {
		t.Parallel()
		cfg := defaults
		cfg.OldestSnapshot = 0
		b := setup(t, cfg)
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
		release := jobstoretest.HoldSnapshot(t, b.pool)

		res, err := b.r.Pass(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Rebuilt)
		require.Contains(t, res.Postponed, "snapshot")

		// Closed: the rebuild waits for the vacuum that removes what the
		// snapshot kept, which may not have begun yet.
		release()
		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Rebuilt)
		require.Contains(t, res.Postponed, "vacuum")
		requireRebuiltAfterAVacuum(t, b)
	})

	t.Run("RebuildsTheClaimIndexOnceMoreWhenTheHeapIsBackAfterALongSnapshot", func(t *testing.T) {
		t.Parallel()
		cfg := defaults
		cfg.OldestSnapshot = 0
		b := setup(t, cfg)
		// Finished jobs at the head of the heap: its size before the
		// snapshot, which stays.
		_, err := b.pool.Exec(ctx, `INSERT INTO jobs (id, topic) SELECT gen_random_uuid(), 'kept.topic' FROM generate_series(1, 10000)`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE jobs SET status = 'CANCELED', finished_at = now()`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `VACUUM (ANALYZE) jobs`)
		require.NoError(t, err)
		before := heapBytes(t, b.pool)

		// A long snapshot, through which the queue passes forty thousand
		// jobs: nothing is removed, the heap and the indexes grow.
		release := jobstoretest.HoldSnapshot(t, b.pool)
		res, err := b.r.Pass(ctx) // nothing due: it only looks
		require.NoError(t, err)
		require.Empty(t, res.Rebuilt)
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
		release()
		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		require.Contains(t, res.Postponed, "vacuum")
		requireRebuiltAfterAVacuum(t, b)
		require.Greater(t, float64(heapBytes(t, b.pool)), reindex.HeapRegrowth*float64(before),
			"the kept jobs hold the heap's end: the vacuum could not give it back")
		claimBefore := b.observer.sizes["jobs_claim_idx"].Bytes
		require.Contains(t, b.observer.reindexed, "jobs_claim_idx", "rebuilt in the cleanup's round")

		// The queue passes as many again through the claim index before
		// the heap is back: within the hour, and not twice its size at the
		// rebuild, it is left as it is.
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		claim := b.observer.sizes["jobs_claim_idx"]
		require.GreaterOrEqual(t, claim.Bloat(), config.ReindexBloatDefault)
		require.Less(t, float64(claim.Bytes), reindex.Regrowth*float64(claimBefore))
		require.NotContains(t, res.Rebuilt, "jobs_claim_idx", "the heap is still large")

		// The queue empties, a vacuum gives the heap's end back: the claim
		// index is rebuilt again, within the hour.
		_, err = b.pool.Exec(ctx, `UPDATE jobs SET status = 'CANCELED', finished_at = now() WHERE topic = 'bloat.topic'`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `DELETE FROM jobs WHERE topic = 'bloat.topic'`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `VACUUM jobs`)
		require.NoError(t, err)
		require.LessOrEqual(t, float64(heapBytes(t, b.pool)), reindex.HeapRegrowth*float64(before))
		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		require.Contains(t, res.Rebuilt, "jobs_claim_idx")
		require.Len(t, b.observer.reindexed["jobs_claim_idx"], 2)

		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		require.NotContains(t, res.Rebuilt, "jobs_claim_idx", "once: the cooldown holds again")
	})

	for name, slow := range map[string]func(testing.TB, *pgxpool.Pool) func(){
		"WaitsForAVacuumOfTheTableToEnd": jobstoretest.SlowVacuum,
		// As an autovacuum analyzes the table after its vacuum: Postgres
		// cancels the analyze when a rebuild waits for its lock.
		"WaitsForAnAnalyzeOfTheTableToEnd": jobstoretest.SlowAnalyze,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			waitsFor(t, slow)
		})
	}

	t.Run("OneReaperAtATime", func(t *testing.T) {
		t.Parallel()
		b := setup(t, defaults)
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
		other, err := b.store.OpenIndexMaintenance(ctx, jobstore.ReindexLockTimeout)
		require.NoError(t, err)
		require.NotNil(t, other)

		res, err := b.r.Pass(ctx)
		require.NoError(t, err)
		require.Equal(t, reindex.Result{}, res, "another reaper holds the lock")
		require.Empty(t, b.observer.sizes, "it did not even look")

		require.NoError(t, other.Close(ctx))
		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		require.Contains(t, res.Rebuilt, "jobs_pkey")
	})

	t.Run("AReaperTakingTheLockOverWaitsForTheVacuumAfterASnapshotItWatched", func(t *testing.T) {
		t.Parallel()
		cfg := defaults
		cfg.OldestSnapshot = 0
		b := setup(t, cfg)
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
		other, err := b.store.OpenIndexMaintenance(ctx, jobstore.ReindexLockTimeout)
		require.NoError(t, err)
		require.NotNil(t, other)
		closeOther := sync.OnceValue(func() error { return other.Close(ctx) })
		t.Cleanup(func() { _ = closeOther() })

		// Another reaper holds the lock while a snapshot opens and closes.
		release := jobstoretest.HoldSnapshot(t, b.pool)
		res, err := b.r.Pass(ctx)
		require.NoError(t, err)
		require.Equal(t, reindex.Result{}, res, "another reaper holds the lock")
		release()
		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		require.Equal(t, reindex.Result{}, res, "another reaper holds the lock")

		// It lets go before the vacuum after the snapshot: this reaper
		// waits for that vacuum as the holder would have.
		require.NoError(t, closeOther())
		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Rebuilt)
		require.Contains(t, res.Postponed, "vacuum")
		requireRebuiltAfterAVacuum(t, b)
	})

	t.Run("DropsAFailedRebuildsLeftoverFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, defaults)
		// What a rebuild of jobs_pkey cancelled part-way leaves: an
		// invalid copy (here over topic, which repeats, so it cannot be
		// built; the name is what marks it).
		_, err := b.pool.Exec(ctx, `INSERT INTO jobs (id, topic) SELECT gen_random_uuid(), 'same.topic' FROM generate_series(1, 2)`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY jobs_pkey_ccnew ON jobs (topic)`)
		require.Error(t, err)

		res, err := b.r.Pass(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"jobs_pkey_ccnew"}, res.Dropped)
		var left bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT to_regclass('jobs_pkey_ccnew') IS NOT NULL`).Scan(&left))
		require.False(t, left)
	})

	t.Run("AFailedRebuildIsReportedAndItsLeftoverDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, defaults)
		// Lock waits that give up after half a second, not a minute.
		b.r = reindex.NewReindexer(defaults, reindex.StoreOpener(b.store, 500*time.Millisecond), reindex.StoreWatcher(b.store), b.observer,
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
		// A writer that does not commit: a rebuild waits for it once its
		// new index is defined, past its lock timeout, and fails there.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `INSERT INTO jobs (id, topic) VALUES (gen_random_uuid(), 'open.writer')`)
		require.NoError(t, err)

		res, err := b.r.Pass(ctx)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%v", err)
		require.Equal(t, "55P03", pgErr.Code, "lock_timeout: %v", err)
		require.Empty(t, res.Rebuilt)
		require.Len(t, b.observer.reindexed, 1, "the pass stopped at the failure")
		var failed string
		for name, errs := range b.observer.reindexed {
			failed = name
			require.Len(t, errs, 1)
			require.ErrorIs(t, err, errs[0])
		}
		var leftovers []string
		rows, err := b.pool.Query(ctx, `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE i.indrelid = 'jobs'::regclass AND NOT i.indisvalid`)
		require.NoError(t, err)
		leftovers, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{failed + "_ccnew"}, leftovers, "dropping it waited for the same writer and failed too")

		require.NoError(t, tx.Rollback(ctx))
		res, err = b.r.Pass(ctx)
		require.NoError(t, err)
		require.Equal(t, leftovers, res.Dropped)
		require.Contains(t, res.Rebuilt, failed)
	})
}

// logged is a slog handler that signals the channel keyed by a record's
// message, once, when one is logged.
type logged map[string]chan struct{}

func (l logged) Enabled(context.Context, slog.Level) bool { return true }
func (l logged) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logged) WithGroup(string) slog.Handler            { return l }

func (l logged) Handle(_ context.Context, r slog.Record) error {
	if ch, ok := l[r.Message]; ok {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return nil
}

// waitsFor starts what slow starts on a table with bloated indexes and
// requires that a pass waits for it to end and then rebuilds.
func waitsFor(t *testing.T, slow func(testing.TB, *pgxpool.Pool) func()) {
	t.Helper()
	waiting := make(chan struct{}, 1)
	b := setup(t, defaults)
	b.r = reindex.NewReindexer(defaults, reindex.StoreOpener(b.store, jobstore.ReindexLockTimeout), reindex.StoreWatcher(b.store), b.observer,
		slog.New(logged{"waiting for a vacuum or an analyze of the jobs table to end before a rebuild": waiting}))
	jobstoretest.BloatIndexes(t, b.pool, "bloat.topic", 40000, 500)
	_, err := b.pool.Exec(ctx, `UPDATE jobs SET status = 'CANCELED', finished_at = now()`) // dead versions to vacuum slowly
	require.NoError(t, err)
	stop := slow(t, b.pool)

	type passed struct {
		res reindex.Result
		err error
	}
	done := make(chan passed, 1)
	go func() { res, err := b.r.Pass(ctx); done <- passed{res, err} }()
	select {
	case <-waiting:
	case p := <-done:
		t.Fatalf("the pass did not wait for it: rebuilt %v, postponed %q, error %v", p.res.Rebuilt, p.res.Postponed, p.err)
	}
	stop()
	p := <-done
	require.NoError(t, p.err)
	require.Empty(t, p.res.Postponed)
	require.Contains(t, p.res.Rebuilt, "jobs_pkey", "rebuilt once it ended")
}
