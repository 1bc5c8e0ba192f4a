package fire_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/schedule"
	"github.com/pulsequeue/pulse/services/scheduler/internal/fire"
)

// manualClock moves only when the test says so.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	c  chan time.Time
}

func (m *manualClock) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

func (m *manualClock) After(d time.Duration) <-chan time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(chan time.Time, 1)
	if d <= 0 {
		c <- m.now
		return c
	}
	m.waiters = append(m.waiters, waiter{m.now.Add(d), c})
	return c
}

func (m *manualClock) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if w.at.After(m.now) {
			kept = append(kept, w)
			continue
		}
		w.c <- m.now
	}
	m.waiters = kept
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func create(t *testing.T, store *jobstore.Store, kind, expr string, next time.Time) *jobstore.Schedule {
	t.Helper()
	sc, err := store.CreateSchedule(context.Background(), jobstore.Schedule{
		ID: uuid.New(), Name: "s-" + uuid.NewString()[:8], Topic: "fire.test", MaxAttempts: 3,
		Kind: kind, Expression: expr, Enabled: true, NextRunAt: &next,
	})
	require.NoError(t, err)
	return sc
}

func jobsOf(t *testing.T, store *jobstore.Store, id uuid.UUID) []*jobstore.Job {
	t.Helper()
	jobs, err := store.ScheduleJobs(context.Background(), id, nil, 1000)
	require.NoError(t, err)
	return jobs
}

func TestPassFiresEveryCronAndAtOnTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := jobstore.New(pgtest.Pool(t))
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &manualClock{now: t0}
	reg := prometheus.NewRegistry()
	m := fire.NewMetrics(reg)
	loop := fire.New(fire.Config{Clock: clk, Batch: 2}, store, m, discard)

	every := create(t, store, schedule.KindEvery, "2s", t0.Add(2*time.Second))
	cronS, _ := schedule.Parse(schedule.KindCron, "*/3 * * * * *", "UTC")
	cron := create(t, store, schedule.KindCron, "*/3 * * * * *", cronS.First(t0))
	at := create(t, store, schedule.KindAt, t0.Add(5*time.Second).Format(time.RFC3339), t0.Add(5*time.Second))

	for range 10 {
		clk.Advance(time.Second)
		_, err := loop.Pass(ctx)
		require.NoError(t, err)
	}
	require.Len(t, jobsOf(t, store, every.ID), 5, "every 2s over 10s")
	require.Len(t, jobsOf(t, store, cron.ID), 3, "at 3, 6, 9s")
	require.Len(t, jobsOf(t, store, at.ID), 1)
	got, err := store.GetSchedule(ctx, at.ID)
	require.NoError(t, err)
	require.Nil(t, got.NextRunAt, "an at schedule stops after its fire")
	for _, j := range jobsOf(t, store, every.ID) {
		require.Equal(t, jobstore.OccurrenceJobID(every.ID, j.NextRunAt), j.ID)
		require.NotEmpty(t, j.TraceParent, "the fire span is the job's trace context")
	}
	require.Equal(t, 9.0, testutil.ToFloat64(m.Fires.WithLabelValues("fire.test")))
	require.Equal(t, 3.0, testutil.ToFloat64(m.Schedules.WithLabelValues("enabled")))

	// Downtime: 30s pass without a pass; the latest missed fires once.
	clk.Advance(30 * time.Second)
	_, err = loop.Pass(ctx)
	require.NoError(t, err)
	require.Len(t, jobsOf(t, store, every.ID), 6)
	require.Len(t, jobsOf(t, store, cron.ID), 4)
}

func TestRunSleepsUntilTheNextDueAndWakesOnChange(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := jobstore.New(pool)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &manualClock{now: t0}
	loop := fire.New(fire.Config{Clock: clk}, store, nil, discard)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { loop.Run(ctx) })
	wg.Go(func() { fire.Listen(ctx, pool, loop.Wake, discard) })
	defer func() { cancel(); wg.Wait() }()

	sc := create(t, store, schedule.KindEvery, "1s", t0.Add(time.Second))
	for i := 1; i <= 3; i++ {
		// Advance only once the loop sleeps, so each step is one occurrence.
		require.Eventually(t, func() bool {
			clk.mu.Lock()
			defer clk.mu.Unlock()
			return len(clk.waiters) > 0
		}, 5*time.Second, time.Millisecond)
		clk.Advance(time.Second)
		require.Eventually(t, func() bool { return len(jobsOf(t, store, sc.ID)) == i }, 5*time.Second, 5*time.Millisecond)
	}
	// Updated: moved to the topic "fire.updated" and a cursor 10s out, the
	// running loop picks the change up (NOTIFY) and fires the new version.
	waitSleeping := func() {
		require.Eventually(t, func() bool {
			clk.mu.Lock()
			defer clk.mu.Unlock()
			return len(clk.waiters) > 0
		}, 5*time.Second, time.Millisecond)
	}
	updated := *sc
	updated.Topic = "fire.updated"
	next := clk.Now().Add(10 * time.Second)
	updated.NextRunAt = &next
	_, err := store.UpdateSchedule(context.Background(), updated)
	require.NoError(t, err)
	waitSleeping()
	clk.Advance(10 * time.Second)
	require.Eventually(t, func() bool {
		jobs := jobsOf(t, store, sc.ID)
		return len(jobs) == 4 && jobs[0].Topic == "fire.updated"
	}, 5*time.Second, 5*time.Millisecond, "the update took effect without a restart")

	// Disabled: the loop notices without a restart and fires nothing more.
	_, err = store.SetScheduleEnabled(context.Background(), sc.ID, false, nil)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	clk.Advance(5 * time.Second)
	time.Sleep(200 * time.Millisecond)
	require.Len(t, jobsOf(t, store, sc.ID), 4)
}

func TestFiresWhileDispatchIsPaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	store := jobstore.New(pool)
	_, err := pool.Exec(ctx, `UPDATE dispatch_control SET paused = true, reason = 'upgrade', actor = 'op', paused_at = now() WHERE scope = '*'`)
	require.NoError(t, err)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &manualClock{now: t0}
	loop := fire.New(fire.Config{Clock: clk}, store, nil, discard)
	sc := create(t, store, schedule.KindEvery, "1s", t0.Add(time.Second))
	clk.Advance(time.Second)
	n, err := loop.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	jobs := jobsOf(t, store, sc.ID)
	require.Len(t, jobs, 1)
	require.Equal(t, jobstore.StatusPending, jobs[0].Status, "the job queues behind the pause")
}

// TestAScheduleWithoutAnOccurrenceNeverFires: rows stored before such
// expressions were refused (a cron that never fires, whose cursor was the
// zero time; an every schedule on a zero cursor) are stopped, not fired at
// once with a zero occurrence, and the good schedule in the same pass
// still fires.
func TestAScheduleWithoutAnOccurrenceNeverFires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := jobstore.New(pgtest.Pool(t))
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &manualClock{now: t0}
	loop := fire.New(fire.Config{Clock: clk}, store, nil, discard)

	never := create(t, store, schedule.KindCron, "0 0 30 2 *", time.Time{})
	zeroEvery := create(t, store, schedule.KindEvery, "1h", time.Time{})
	good := create(t, store, schedule.KindEvery, "1s", t0.Add(time.Second))
	clk.Advance(time.Second)
	n, err := loop.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the good schedule fired")
	require.Len(t, jobsOf(t, store, good.ID), 1)
	for _, sc := range []*jobstore.Schedule{never, zeroEvery} {
		require.Empty(t, jobsOf(t, store, sc.ID), sc.Expression)
		got, err := store.GetSchedule(ctx, sc.ID)
		require.NoError(t, err)
		require.Nil(t, got.NextRunAt, "%s is stopped", sc.Expression)
		require.Nil(t, got.LastFiredAt, "%s never fired", sc.Expression)
	}
}
