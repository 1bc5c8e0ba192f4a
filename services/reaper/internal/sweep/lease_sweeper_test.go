package sweep_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
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

// countingReaper counts reap statements against the real store and can
// pretend the database is down.
type countingReaper struct {
	store *jobstore.Store
	calls atomic.Int64
	down  atomic.Bool
}

func (r *countingReaper) Reap(ctx context.Context, limit int) ([]jobstore.Reaped, error) {
	r.calls.Add(1)
	if r.down.Load() {
		return nil, apierr.Unavailable("reap: database unreachable", errors.New("connection refused"))
	}
	return r.store.Reap(ctx, limit)
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
