package sweep_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/reaper/internal/fixture"
	"github.com/pulsequeue/pulse/services/reaper/internal/reapmetrics"
	"github.com/pulsequeue/pulse/services/reaper/internal/sweep"
)

// countingReaper counts reap statements against the real store, whole
// walks and recent ones, and can pretend the database is down.
type countingReaper struct {
	store  *jobstore.Store
	calls  atomic.Int64
	recent atomic.Int64 // of calls, the ReapRecent ones
	down   atomic.Bool
}

func (r *countingReaper) Reap(ctx context.Context, limit int) ([]jobstore.Reaped, error) {
	r.calls.Add(1)
	if r.down.Load() {
		return nil, apierr.Unavailable("reap: database unreachable", errors.New("connection refused"))
	}
	return r.store.Reap(ctx, limit)
}

func (r *countingReaper) ReapRecent(ctx context.Context, limit int, within time.Duration) ([]jobstore.Reaped, error) {
	r.calls.Add(1)
	r.recent.Add(1)
	if r.down.Load() {
		return nil, apierr.Unavailable("reap: database unreachable", errors.New("connection refused"))
	}
	return r.store.ReapRecent(ctx, limit, within)
}

type testBundle struct {
	pool    *pgxpool.Pool
	reaper  *countingReaper
	metrics *reapmetrics.Metrics
	sweeper *sweep.LeaseSweeper
}

// setup builds a sweeper on a fresh database. The tests call Sweep, one
// tick of the loop, themselves: when the loop ticks is pkg/server/loop's
// business, tested there.
func setup(t *testing.T, batch int) *testBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	m := reapmetrics.New(prometheus.NewRegistry())
	b := &testBundle{
		pool:    pool,
		reaper:  &countingReaper{store: jobstore.New(pool, jobstore.ThroughputWriter("reaper-test"))},
		metrics: m,
	}
	b.sweeper = sweep.NewLeaseSweeper(sweep.Config{Batch: batch},
		b.reaper, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return b
}

func TestLeaseSweeper(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("ReapsOnlyExpiredLeases", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		retried := fixture.Running(t, b.pool, fixture.RunningOpts{Topic: "email.send", Worker: "worker-1", LeaseIn: -time.Second})
		lastAttempt := fixture.Running(t, b.pool, fixture.RunningOpts{Topic: "email.send", Worker: "worker-2", Attempts: 3, MaxAttempts: 3, LeaseIn: -time.Minute})
		alive := fixture.Running(t, b.pool, fixture.RunningOpts{Worker: "worker-3", LeaseIn: time.Minute})
		aliveBefore := fixture.Job(t, b.pool, alive)

		n, err := b.sweeper.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)

		j := fixture.Job(t, b.pool, retried)
		require.Equal(t, pulsetype.StatusRetrying, j.Status)
		require.EqualValues(t, 1, j.Attempts)
		require.Nil(t, j.LeaseUntil)
		require.Nil(t, j.FinishedAt)
		require.Len(t, j.Errors, 1)
		require.Equal(t, jobstore.LeaseExpiredError, j.Errors[0].Error)
		require.Equal(t, "worker-1", j.Errors[0].Worker)
		require.Equal(t, 1, j.Errors[0].Attempt)

		j = fixture.Job(t, b.pool, lastAttempt)
		require.Equal(t, pulsetype.StatusDeadLettered, j.Status)
		require.EqualValues(t, 3, j.Attempts)
		require.NotNil(t, j.FinishedAt)
		require.Len(t, j.Errors, 1)
		require.Equal(t, jobstore.LeaseExpiredError, j.Errors[0].Error)
		require.Equal(t, "worker-2", j.Errors[0].Worker)
		require.Equal(t, 3, j.Errors[0].Attempt)

		require.Equal(t, aliveBefore, fixture.Job(t, b.pool, alive))

		require.EqualValues(t, 1, testutil.ToFloat64(b.metrics.JobsReaped.WithLabelValues("email.send", reapmetrics.OutcomeRetried)))
		require.EqualValues(t, 1, testutil.ToFloat64(b.metrics.JobsReaped.WithLabelValues("email.send", reapmetrics.OutcomeDeadLettered)))
		require.EqualValues(t, 1, testutil.ToFloat64(b.metrics.Sweeps.WithLabelValues(reapmetrics.ResultOK)))

		// The sweep's statement counted both as failed attempts, one of
		// them dead-lettered, under the reaper's id.
		var failed, dead int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT failed, dead_lettered FROM job_throughput
			WHERE topic = 'email.send' AND writer = 'reaper-test'`).Scan(&failed, &dead))
		require.Equal(t, []int64{2, 1}, []int64{failed, dead})
	})

	t.Run("ReapsMoreThanOneBatchInOneTick", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 10)
		for range 35 {
			fixture.Running(t, b.pool, fixture.RunningOpts{LeaseIn: -time.Second})
		}
		n, err := b.sweeper.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 35, n)
		require.EqualValues(t, 35, countStatus(t, b.pool, pulsetype.StatusRetrying))
		require.EqualValues(t, 4, b.reaper.calls.Load(), "each statement settles at most one batch: 10+10+10+5")

		// The next backlog waits for the next tick, then is reaped the same way.
		for range 12 {
			fixture.Running(t, b.pool, fixture.RunningOpts{LeaseIn: -time.Second})
		}
		n, err = b.sweeper.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 12, n)
		require.EqualValues(t, 47, countStatus(t, b.pool, pulsetype.StatusRetrying))
		require.EqualValues(t, 0, countStatus(t, b.pool, pulsetype.StatusRunning))
		require.EqualValues(t, 2, testutil.ToFloat64(b.metrics.Sweeps.WithLabelValues(reapmetrics.ResultOK)))
	})

	t.Run("ConcurrentSweepersReapEachJobExactlyOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 7)
		ids := make([]uuid.UUID, 200)
		for i := range ids {
			ids[i] = fixture.Running(t, b.pool, fixture.RunningOpts{LeaseIn: -time.Second})
		}
		sweepers := make([]*sweep.LeaseSweeper, 3)
		for i := range sweepers {
			sweepers[i] = sweep.NewLeaseSweeper(sweep.Config{Batch: 7},
				b.reaper, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		}
		var total atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, s := range sweepers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// Keep sweeping until nothing is left, as replicas on
				// their own tickers would.
				for {
					n, err := s.Sweep(ctx)
					if !assertNoError(t, err) || n == 0 {
						return
					}
					total.Add(int64(n))
				}
			}()
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 200, total.Load())
		for _, id := range ids {
			j := fixture.Job(t, b.pool, id)
			require.Equal(t, pulsetype.StatusRetrying, j.Status)
			require.EqualValues(t, 1, j.Attempts, "a reap never changes the attempt count")
			require.Len(t, j.Errors, 1, "job %s reaped more than once", id)
		}
	})

	t.Run("ReportsADatabaseOutageAndCatchesUpAfterIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		expired := fixture.Running(t, b.pool, fixture.RunningOpts{LeaseIn: -time.Second})
		b.reaper.down.Store(true)
		for range 2 {
			_, err := b.sweeper.Sweep(ctx)
			require.ErrorIs(t, err, apierr.ErrUnavailable, "returned for the loop to log, count and retry")
		}
		require.EqualValues(t, 2, testutil.ToFloat64(b.metrics.Sweeps.WithLabelValues(reapmetrics.ResultError)))
		require.Equal(t, pulsetype.StatusRunning, fixture.Job(t, b.pool, expired).Status)

		b.reaper.down.Store(false)
		n, err := b.sweeper.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, pulsetype.StatusRetrying, fixture.Job(t, b.pool, expired).Status)
	})

	t.Run("ACanceledSweepReapsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		expired := fixture.Running(t, b.pool, fixture.RunningOpts{LeaseIn: -time.Second})
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		_, err := b.sweeper.Sweep(canceled)
		require.Error(t, err)
		require.Equal(t, pulsetype.StatusRunning, fixture.Job(t, b.pool, expired).Status, "a statement cut short rolls back whole")
	})
}

// The sweeps between whole walks (ADR-0067) run on the bubble's clock
// (testing/synctest): it moves only when the test sleeps, by exactly what
// it sleeps. The database is real, its pool in the bubble, and its clock
// the real one: leases are placed relative to it.

// lapsedRow builds a RUNNING job whose lease lapsed ago before now, by the
// database's clock: as a claim or heartbeat that committed late leaves it.
func lapsedRow(t *testing.T, pool *pgxpool.Pool, ago time.Duration) uuid.UUID {
	t.Helper()
	id := fixture.Running(t, pool, fixture.RunningOpts{LeaseIn: time.Hour})
	_, err := pool.Exec(t.Context(), `UPDATE jobs SET lease_until = now() - $2::bigint * interval '1 microsecond' WHERE id = $1`,
		id, ago.Microseconds())
	require.NoError(t, err)
	return id
}

// bubbleSetup is setup inside a bubble: the store is closed with the test,
// since nothing may outlive a bubble.
func bubbleSetup(t *testing.T, cfg sweep.Config) *testBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	store := jobstore.New(pool, jobstore.ThroughputWriter("reaper-test"))
	t.Cleanup(func() { _ = store.Close() })
	b := &testBundle{pool: pool, reaper: &countingReaper{store: store}, metrics: reapmetrics.New(prometheus.NewRegistry())}
	b.sweeper = sweep.NewLeaseSweeper(cfg, b.reaper, b.metrics, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return b
}

func TestSweepsBetweenWholeWalksWalkOnlyWhatLapsedSinceTheLast(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleSetup(t, sweep.Config{Batch: 100, WholeEvery: 5 * time.Minute, Overlap: 10 * time.Second})

		// The first sweep of a process walks everything.
		old := lapsedRow(t, b.pool, time.Hour)
		n, err := b.sweeper.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, pulsetype.StatusRetrying, fixture.Job(t, b.pool, old).Status)
		require.Zero(t, b.reaper.recent.Load())

		// Ten seconds later: what lapsed since is reaped by a recent walk;
		// a lease that appeared already lapsed an hour ago is not its.
		time.Sleep(10 * time.Second)
		fresh := lapsedRow(t, b.pool, 5*time.Second)
		late := lapsedRow(t, b.pool, time.Hour)
		n, err = b.sweeper.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, pulsetype.StatusRetrying, fixture.Job(t, b.pool, fresh).Status)
		require.Equal(t, pulsetype.StatusRunning, fixture.Job(t, b.pool, late).Status)
		require.EqualValues(t, 1, b.reaper.recent.Load())

		// Within the overlap before the last sweep's start: still reaped.
		time.Sleep(10 * time.Second)
		edge := lapsedRow(t, b.pool, 15*time.Second)
		n, err = b.sweeper.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, pulsetype.StatusRetrying, fixture.Job(t, b.pool, edge).Status)

		// WholeEvery after the last whole walk, the next walks everything.
		time.Sleep(5 * time.Minute)
		n, err = b.sweeper.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, pulsetype.StatusRetrying, fixture.Job(t, b.pool, late).Status)
		require.EqualValues(t, 2, b.reaper.recent.Load(), "the third sweep walked everything")
	})
}

func TestAFailedSweepLeavesItsSpanToTheNext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleSetup(t, sweep.Config{Batch: 100, WholeEvery: time.Hour, Overlap: 10 * time.Second})
		_, err := b.sweeper.Sweep(ctx) // whole
		require.NoError(t, err)

		// A minute on, the sweep fails; the next, at once, reaches back to
		// the last one that succeeded, a minute and its overlap ago.
		time.Sleep(time.Minute)
		b.reaper.down.Store(true)
		_, err = b.sweeper.Sweep(ctx)
		require.ErrorIs(t, err, apierr.ErrUnavailable)
		b.reaper.down.Store(false)
		missed := lapsedRow(t, b.pool, 30*time.Second)
		n, err := b.sweeper.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the lease that lapsed before the failed sweep was left behind")
		require.Equal(t, pulsetype.StatusRetrying, fixture.Job(t, b.pool, missed).Status)
		require.EqualValues(t, 2, b.reaper.recent.Load())
	})
}

func countStatus(t *testing.T, pool *pgxpool.Pool, s pulsetype.Status) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE status = $1`, string(s)).Scan(&n))
	return n
}

// assertNoError reports err from a goroutine, where require may not stop
// the test.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("sweep: %v", err)
		return false
	}
	return true
}
