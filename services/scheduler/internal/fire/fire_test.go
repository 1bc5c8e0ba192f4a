package fire_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pglisten"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
	"github.com/pulsequeue/pulse/pkg/server/schedule"
	"github.com/pulsequeue/pulse/services/scheduler/internal/fire"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// newStore is a store on pool whose read side closes when the test ends
// (in a synctest bubble nothing may outlive the test).
func newStore(t *testing.T, pool *pgxpool.Pool) *jobstore.Store {
	store := jobstore.New(pool)
	t.Cleanup(func() { _ = store.Close() })
	return store
}

func create(t *testing.T, store *jobstore.Store, kind, expr string, next time.Time) *jobstore.Schedule {
	t.Helper()
	sc, err := store.CreateSchedule(t.Context(), jobstore.Schedule{
		ID: uuid.New(), Name: "s-" + uuid.NewString()[:8], Topic: "fire.test", MaxAttempts: 3,
		Kind: kind, Expression: expr, Enabled: true, NextRunAt: &next,
	})
	require.NoError(t, err)
	return sc
}

func jobsOf(t *testing.T, store *jobstore.Store, id uuid.UUID) []*jobstore.Job {
	t.Helper()
	jobs, err := store.ScheduleJobs(t.Context(), id, nil, 1000)
	require.NoError(t, err)
	return jobs
}

// The loop's clock is the bubble's (testing/synctest): time starts at
// midnight and moves only when every goroutine of the test waits, by
// exactly what they wait for, so a test sleeps ten seconds in no time and
// each step is one occurrence. The database is real; its pool lives in the
// bubble.

func TestPassFiresEveryCronAndAtOnTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testPassFiresEveryCronAndAtOnTime)
}

func testPassFiresEveryCronAndAtOnTime(t *testing.T) {
	ctx := t.Context()
	store := newStore(t, pgtest.Pool(t))
	t0 := time.Now()
	reg := prometheus.NewRegistry()
	m := fire.NewMetrics(reg)
	var logs proctest.Buffer // the loop writes while the test reads
	loop := fire.New(fire.Config{Batch: 2}, store, m, slog.New(slog.NewJSONHandler(&logs, nil)))

	every := create(t, store, schedule.KindEvery, "2s", t0.Add(2*time.Second))
	cronS, _ := schedule.Parse(schedule.KindCron, "*/3 * * * * *", "UTC")
	cron := create(t, store, schedule.KindCron, "*/3 * * * * *", cronS.First(t0))
	at := create(t, store, schedule.KindAt, t0.Add(5*time.Second).Format(time.RFC3339), t0.Add(5*time.Second))

	for range 10 {
		time.Sleep(time.Second)
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
	require.Zero(t, testutil.ToFloat64(m.Missed.WithLabelValues("fire.test")), "every occurrence fired on time")
	require.NotContains(t, logs.String(), fire.MissedOccurrencesMsg)

	// Downtime: 30s pass without a pass; the latest missed fires once, and
	// the fire says which occurrences it skipped.
	cursor, err := store.GetSchedule(ctx, every.ID)
	require.NoError(t, err)
	time.Sleep(30 * time.Second)
	_, err = loop.Pass(ctx)
	require.NoError(t, err)
	require.Len(t, jobsOf(t, store, every.ID), 6)
	require.Len(t, jobsOf(t, store, cron.ID), 4)
	require.Equal(t, 2.0, testutil.ToFloat64(m.Missed.WithLabelValues("fire.test")), "the every and the cron schedule")
	var missed []map[string]any
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == fire.MissedOccurrencesMsg && rec["schedule_id"] == every.ID.String() {
			missed = append(missed, rec)
		}
	}
	require.Len(t, missed, 1)
	latest := jobsOf(t, store, every.ID)[0].NextRunAt // newest first
	require.Equal(t, cursor.NextRunAt.UTC().Format(time.RFC3339Nano), missed[0]["missed_from"])
	require.Equal(t, latest.UTC().Format(time.RFC3339Nano), missed[0]["occurrence"])
	require.Equal(t, "WARN", missed[0]["level"])
}

func TestRunSleepsUntilTheNextDueAndWakesOnChange(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testRunSleepsUntilTheNextDueAndWakesOnChange)
}

func testRunSleepsUntilTheNextDueAndWakesOnChange(t *testing.T) {
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	t0 := time.Now()
	loop := fire.New(fire.Config{Reconcile: time.Second}, store, nil, discard)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { loop.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	sc := create(t, store, schedule.KindEvery, "3s", t0.Add(3*time.Second))
	synctest.Wait() // the loop sleeps (at most Reconcile)
	for i := 1; i <= 3; i++ {
		// Not a second early: the occurrence is due at 3s.
		time.Sleep(3*time.Second - time.Nanosecond)
		synctest.Wait()
		require.Len(t, jobsOf(t, store, sc.ID), i-1, "before occurrence %d", i)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		require.Len(t, jobsOf(t, store, sc.ID), i, "at occurrence %d", i)
	}

	// Updated: moved to the topic "fire.updated" and a cursor 10s out; the
	// change wakes the loop (the app's NOTIFY listener calls Wake; see
	// TestAScheduleChangeNotifies) and it fires the new version.
	updated := *sc
	updated.Topic = "fire.updated"
	next := time.Now().Add(10 * time.Second)
	updated.NextRunAt = &next
	_, err := store.UpdateSchedule(t.Context(), updated)
	require.NoError(t, err)
	loop.Wake()
	synctest.Wait()
	time.Sleep(10 * time.Second)
	synctest.Wait()
	jobs := jobsOf(t, store, sc.ID)
	require.Len(t, jobs, 4)
	require.Equal(t, "fire.updated", jobs[0].Topic, "the update took effect without a restart")

	// Disabled: the loop notices without a restart and fires nothing more,
	// however long it runs (a minute of passes, every Reconcile).
	_, err = store.SetScheduleEnabled(t.Context(), sc.ID, false, nil)
	require.NoError(t, err)
	loop.Wake()
	synctest.Wait()
	time.Sleep(time.Minute)
	synctest.Wait()
	require.Len(t, jobsOf(t, store, sc.ID), 4)
}

// TestAScheduleChangeNotifies: every write to schedules sends
// pulse_schedules_changed, which the scheduler's listener turns into Wake.
func TestAScheduleChangeNotifies(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	woken := make(chan struct{}, 16)
	l := pglisten.New(pglisten.FromPool(pool), discard)
	l.Handle(jobstore.SchedulesChannel, pglisten.Handler{
		Notify: func(string) { woken <- struct{}{} },
		Resync: func() { woken <- struct{}{} },
	})
	require.NoError(t, l.Start(t.Context()))
	defer func() { require.NoError(t, l.Stop(t.Context())) }()
	next := func(what string) {
		t.Helper()
		select {
		case <-woken:
		case <-time.After(30 * time.Second):
			t.Fatalf("no wake-up: %s", what)
		}
	}
	next("the resync once LISTEN holds")
	sc := create(t, store, schedule.KindEvery, "1s", time.Now().Add(time.Hour))
	next("create")
	_, err := store.SetScheduleEnabled(t.Context(), sc.ID, false, nil)
	require.NoError(t, err)
	next("disable")
}

func TestFiresWhileDispatchIsPaused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testFiresWhileDispatchIsPaused)
}

func testFiresWhileDispatchIsPaused(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	_, err := pool.Exec(ctx, `UPDATE dispatch_control SET paused = true, reason = 'upgrade', actor = 'op', paused_at = now() WHERE scope = '*'`)
	require.NoError(t, err)
	loop := fire.New(fire.Config{}, store, nil, discard)
	sc := create(t, store, schedule.KindEvery, "1s", time.Now().Add(time.Second))
	time.Sleep(time.Second)
	n, err := loop.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	jobs := jobsOf(t, store, sc.ID)
	require.Len(t, jobs, 1)
	require.Equal(t, pulsetype.StatusPending, jobs[0].Status, "the job queues behind the pause")
}

// TestAScheduleWithoutAnOccurrenceNeverFires: rows stored before such
// expressions were refused (a cron that never fires, whose cursor was the
// zero time; an every schedule on a zero cursor) are stopped, not fired at
// once with a zero occurrence, and the good schedule in the same pass
// still fires.
func TestAScheduleWithoutAnOccurrenceNeverFires(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testAScheduleWithoutAnOccurrenceNeverFires)
}

func testAScheduleWithoutAnOccurrenceNeverFires(t *testing.T) {
	ctx := t.Context()
	store := newStore(t, pgtest.Pool(t))
	t0 := time.Now()
	loop := fire.New(fire.Config{}, store, nil, discard)

	never := create(t, store, schedule.KindCron, "0 0 30 2 *", time.Time{})
	zeroEvery := create(t, store, schedule.KindEvery, "1h", time.Time{})
	good := create(t, store, schedule.KindEvery, "1s", t0.Add(time.Second))
	time.Sleep(time.Second)
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
