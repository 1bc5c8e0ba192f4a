package retention_test

import (
	"context"
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
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/reaper/internal/fixture"
	"github.com/pulsequeue/pulse/services/reaper/internal/reapmetrics"
	"github.com/pulsequeue/pulse/services/reaper/internal/retention"
)

// countingDeleter counts retention statements against the real store.
type countingDeleter struct {
	store *jobstore.Store
	calls atomic.Int64

	mu    sync.Mutex
	froms []time.Time // each call's from, in order
	nexts []time.Time // each call's answer
}

func (d *countingDeleter) DeleteFinishedFrom(ctx context.Context, s pulsetype.Status, age time.Duration, limit int, from time.Time) (int64, time.Time, error) {
	d.calls.Add(1)
	n, next, err := d.store.DeleteFinishedFrom(ctx, s, age, limit, from)
	d.mu.Lock()
	d.froms, d.nexts = append(d.froms, from), append(d.nexts, next)
	d.mu.Unlock()
	return n, next, err
}

type testBundle struct {
	pool    *pgxpool.Pool
	deleter *countingDeleter
	metrics *reapmetrics.Metrics
}

// setup builds the store side; the tests call Clean, one tick of the
// loop, themselves (the loop is pkg/server/loop's, tested there).
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	m := reapmetrics.New(prometheus.NewRegistry())
	return &testBundle{
		pool:    pool,
		deleter: &countingDeleter{store: jobstore.New(pool)},
		metrics: m,
	}
}

func (b *testBundle) cleaner(cfg retention.Config) *retention.JobCleaner {
	if cfg.Batch == 0 {
		cfg.Batch = 1000
	}
	return retention.NewJobCleaner(cfg, b.deleter, b.metrics, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func (b *testBundle) exists(t *testing.T, id uuid.UUID) bool {
	t.Helper()
	return fixture.Job(t, b.pool, id) != nil
}

func TestJobCleaner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("DeletesOnlyOldEnoughFinishedJobsPerStatus", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.cleaner(retention.Config{CompletedAge: time.Hour, CanceledAge: 2 * time.Hour, DeadLetteredAge: 3 * time.Hour})

		doomed := []uuid.UUID{
			fixture.Finished(t, b.pool, pulsetype.StatusCompleted, 90*time.Minute),
			fixture.Finished(t, b.pool, pulsetype.StatusCanceled, 150*time.Minute),
			fixture.Finished(t, b.pool, pulsetype.StatusDeadLettered, 200*time.Minute),
		}
		kept := []uuid.UUID{
			fixture.Finished(t, b.pool, pulsetype.StatusCompleted, 30*time.Minute),
			fixture.Finished(t, b.pool, pulsetype.StatusCanceled, 90*time.Minute),
			fixture.Finished(t, b.pool, pulsetype.StatusDeadLettered, 150*time.Minute),
		}

		deleted, err := c.Clean(ctx)
		require.NoError(t, err)
		require.Equal(t, map[pulsetype.Status]int64{
			pulsetype.StatusCompleted: 1, pulsetype.StatusCanceled: 1, pulsetype.StatusDeadLettered: 1,
		}, deleted)
		for _, id := range doomed {
			require.False(t, b.exists(t, id))
		}
		for _, id := range kept {
			require.True(t, b.exists(t, id))
		}
		for _, s := range []pulsetype.Status{pulsetype.StatusCompleted, pulsetype.StatusCanceled, pulsetype.StatusDeadLettered} {
			require.EqualValues(t, 1, testutil.ToFloat64(b.metrics.JobsDeleted.WithLabelValues(reapmetrics.StatusLabel(s))), "status %s", s)
		}
	})

	// Each batch of a pass after the first starts where the one before
	// stopped, and every pass starts from the oldest (ADR-0060).
	t.Run("BatchesOfAPassResumeAndEachPassStartsFromTheOldest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.cleaner(retention.Config{CompletedAge: time.Hour, Batch: 4})
		for i := range 10 {
			fixture.Finished(t, b.pool, pulsetype.StatusCompleted, time.Duration(20-i)*time.Hour)
		}
		deleted, err := c.Clean(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 10, deleted[pulsetype.StatusCompleted])
		b.deleter.mu.Lock()
		froms, nexts := b.deleter.froms, b.deleter.nexts
		b.deleter.mu.Unlock()
		require.Len(t, froms, 3, "4 + 4 + 2")
		require.True(t, froms[0].IsZero(), "the pass's first batch walks from the oldest")
		for i := 1; i < len(froms); i++ {
			require.True(t, froms[i].Equal(nexts[i-1]), "batch %d starts where batch %d stopped", i, i-1)
			require.True(t, froms[i].After(froms[i-1]))
		}

		fixture.Finished(t, b.pool, pulsetype.StatusCompleted, 30*time.Hour) // older than anything the last pass saw
		deleted, err = c.Clean(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, deleted[pulsetype.StatusCompleted], "the next pass starts from the oldest again")
	})

	t.Run("NeverDeletesALiveJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The smallest ages there are: anything finished goes.
		c := b.cleaner(retention.Config{CompletedAge: time.Nanosecond, CanceledAge: time.Nanosecond, DeadLetteredAge: time.Nanosecond})
		live := []uuid.UUID{
			fixture.Live(t, b.pool, pulsetype.StatusPending),
			fixture.Live(t, b.pool, pulsetype.StatusRetrying),
			fixture.Running(t, b.pool, fixture.RunningOpts{LeaseIn: time.Minute}),
			fixture.Running(t, b.pool, fixture.RunningOpts{LeaseIn: -time.Hour}),
		}
		finished := fixture.Finished(t, b.pool, pulsetype.StatusCompleted, time.Hour)

		_, err := c.Clean(ctx)
		require.NoError(t, err)
		require.False(t, b.exists(t, finished))
		for _, id := range live {
			require.True(t, b.exists(t, id))
		}
	})

	t.Run("AZeroAgeKeepsThatStatusForever", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.cleaner(retention.Config{CompletedAge: 0, CanceledAge: time.Hour, DeadLetteredAge: 0})
		oldCompleted := fixture.Finished(t, b.pool, pulsetype.StatusCompleted, 365*24*time.Hour)
		oldDead := fixture.Finished(t, b.pool, pulsetype.StatusDeadLettered, 365*24*time.Hour)
		oldCanceled := fixture.Finished(t, b.pool, pulsetype.StatusCanceled, 365*24*time.Hour)

		deleted, err := c.Clean(ctx)
		require.NoError(t, err)
		require.Equal(t, map[pulsetype.Status]int64{pulsetype.StatusCanceled: 1}, deleted)
		require.True(t, b.exists(t, oldCompleted))
		require.True(t, b.exists(t, oldDead))
		require.False(t, b.exists(t, oldCanceled))
		require.EqualValues(t, 1, b.deleter.calls.Load(), "a disabled status costs no statement")
	})

	t.Run("DeletesInBoundedBatchesUntilOneComesBackShort", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.cleaner(retention.Config{CompletedAge: time.Hour, Batch: 10})
		for range 25 {
			fixture.Finished(t, b.pool, pulsetype.StatusCompleted, 2*time.Hour)
		}
		deleted, err := c.Clean(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 25, deleted[pulsetype.StatusCompleted])
		require.EqualValues(t, 3, b.deleter.calls.Load(), "10 + 10 + 5")
		require.EqualValues(t, 25, testutil.ToFloat64(b.metrics.JobsDeleted.WithLabelValues("completed")))
	})

	t.Run("EveryPassDeletesWhatAgedSinceTheLast", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.cleaner(retention.Config{CompletedAge: time.Hour})
		first := fixture.Finished(t, b.pool, pulsetype.StatusCompleted, 2*time.Hour)
		_, err := c.Clean(ctx)
		require.NoError(t, err)
		require.False(t, b.exists(t, first))

		second := fixture.Finished(t, b.pool, pulsetype.StatusCompleted, 2*time.Hour)
		young := fixture.Finished(t, b.pool, pulsetype.StatusCompleted, time.Minute)
		_, err = c.Clean(ctx)
		require.NoError(t, err)
		require.False(t, b.exists(t, second))
		require.True(t, b.exists(t, young))
		require.EqualValues(t, 2, testutil.ToFloat64(b.metrics.RetentionRuns.WithLabelValues(reapmetrics.ResultOK)))
	})
}
