package jobstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/schedule"
)

func newSchedule(name string, next time.Time) jobstore.Schedule {
	return jobstore.Schedule{
		ID: uuid.New(), Name: name, Topic: "sched.test", Args: []byte(`{"k":1}`), Priority: 3, MaxAttempts: 5,
		Kind: schedule.KindEvery, Expression: "1s", Enabled: true, NextRunAt: &next,
	}
}

// planEvery is the scheduler's plan for an every-1s schedule.
func planEvery(sc *jobstore.Schedule, now time.Time) jobstore.Fire {
	s, _ := schedule.Parse(sc.Kind, sc.Expression, sc.TimeZone)
	occ, next := schedule.Latest(s, *sc.NextRunAt, now)
	id := sc.ID
	return jobstore.Fire{Occurrence: occ, Next: &next, Job: pulsetype.NewJob{
		ID: jobstore.OccurrenceJobID(sc.ID, occ), Topic: sc.Topic, Args: sc.Args, Priority: sc.Priority,
		MaxAttempts: sc.MaxAttempts, RunAt: occ, ScheduleID: &id,
	}}
}

func TestScheduleCRUD(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := time.Now().UTC().Truncate(time.Millisecond)
	sc, err := b.store.CreateSchedule(ctx, newSchedule("crud", start))
	require.NoError(t, err)
	require.Equal(t, "UTC", sc.TimeZone)
	require.JSONEq(t, `{"k":1}`, string(sc.Args))
	require.True(t, sc.NextRunAt.Equal(start))

	_, err = b.store.CreateSchedule(ctx, newSchedule("crud", start))
	require.Equal(t, apierr.KindAlreadyExists, apierr.KindOf(err))
	require.Equal(t, "name", apierr.FieldOf(err))

	bad := newSchedule("bad topic", start)
	_, err = b.store.CreateSchedule(ctx, bad)
	require.Equal(t, "name", apierr.FieldOf(err))

	got, err := b.store.GetSchedule(ctx, sc.ID)
	require.NoError(t, err)
	require.Equal(t, sc.Name, got.Name)
	_, err = b.store.GetSchedule(ctx, uuid.New())
	require.Equal(t, apierr.KindNotFound, apierr.KindOf(err))

	_, err = b.store.CreateSchedule(ctx, newSchedule("crud2", start))
	require.NoError(t, err)
	list, err := b.store.ListSchedules(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, list, 2)
	list, err = b.store.ListSchedules(ctx, "crud", 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "crud2", list[0].Name)

	got.Expression = "5s"
	later := start.Add(time.Hour)
	got.NextRunAt = &later
	upd, err := b.store.UpdateSchedule(ctx, *got)
	require.NoError(t, err)
	require.Equal(t, "5s", upd.Expression)
	require.True(t, upd.NextRunAt.Equal(later))

	dis, err := b.store.SetScheduleEnabled(ctx, sc.ID, false, nil)
	require.NoError(t, err)
	require.False(t, dis.Enabled)
	require.True(t, dis.NextRunAt.Equal(later), "disabling keeps the cursor")
	again := start.Add(2 * time.Hour)
	en, err := b.store.SetScheduleEnabled(ctx, sc.ID, true, &again)
	require.NoError(t, err)
	require.True(t, en.Enabled)
	require.True(t, en.NextRunAt.Equal(again), "enabling moves the cursor past the downtime")

	require.NoError(t, b.store.DeleteSchedule(ctx, sc.ID))
	require.Equal(t, apierr.KindNotFound, apierr.KindOf(b.store.DeleteSchedule(ctx, sc.ID)))
}

func TestFireDue(t *testing.T) {
	t.Parallel()

	t.Run("FiresTheLatestMissedOnceAndMovesTheCursor", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		start := time.Now().UTC().Truncate(time.Millisecond).Add(-10 * time.Second)
		sc, err := b.store.CreateSchedule(ctx, newSchedule("missed", start))
		require.NoError(t, err)
		now := start.Add(10*time.Second + 300*time.Millisecond)
		fired, err := b.store.FireDue(ctx, now, 10, func(s *jobstore.Schedule) jobstore.Fire { return planEvery(s, now) })
		require.NoError(t, err)
		require.Len(t, fired, 1)
		require.True(t, fired[0].Inserted)
		require.True(t, fired[0].CursorMove)

		jobs, err := b.store.ScheduleJobs(ctx, sc.ID, nil, 10)
		require.NoError(t, err)
		require.Len(t, jobs, 1, "ten missed occurrences fire once")
		require.Equal(t, jobstore.OccurrenceJobID(sc.ID, start.Add(10*time.Second)), jobs[0].ID)
		require.True(t, jobs[0].NextRunAt.Equal(start.Add(10*time.Second)))

		got, err := b.store.GetSchedule(ctx, sc.ID)
		require.NoError(t, err)
		require.True(t, got.NextRunAt.Equal(start.Add(11*time.Second)))
		require.True(t, got.LastFiredAt.Equal(start.Add(10*time.Second)))

		// Not due any more.
		fired, err = b.store.FireDue(ctx, now, 10, func(s *jobstore.Schedule) jobstore.Fire { return planEvery(s, now) })
		require.NoError(t, err)
		require.Empty(t, fired)
		next, ok, err := b.store.NextScheduleDue(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, next.Equal(start.Add(11*time.Second)))
		c, err := b.store.CountSchedules(ctx, now)
		require.NoError(t, err)
		require.Equal(t, jobstore.ScheduleCounts{Enabled: 1, Due: 0}, c)
	})

	t.Run("ConcurrentFirersInsertOneJobPerOccurrence", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		start := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
		var ids []uuid.UUID
		for i := range 20 {
			sc, err := b.store.CreateSchedule(ctx, newSchedule("conc-"+string(rune('a'+i)), start))
			require.NoError(t, err)
			ids = append(ids, sc.ID)
		}
		// Eight firers walk the same 30 occurrences (one per second of
		// simulated time) of 20 schedules at once.
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for k := range 30 {
					now := start.Add(time.Duration(k) * time.Second)
					for {
						_, err := b.store.FireDue(ctx, now, 3, func(s *jobstore.Schedule) jobstore.Fire { return planEvery(s, now) })
						if err != nil {
							t.Error(err)
							return
						}
						if c, _ := b.store.CountSchedules(ctx, now); c.Due == 0 {
							break
						}
					}
				}
			})
		}
		wg.Wait()
		for _, id := range ids {
			var n, distinct int
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT next_run_at) FROM jobs WHERE schedule_id = $1`, id).Scan(&n, &distinct))
			require.Equal(t, 30, n, "schedule %s: one job per occurrence", id)
			require.Equal(t, 30, distinct)
		}
		// A re-fire of an occurrence already fired is a no-op.
		_, err := b.pool.Exec(ctx, `UPDATE schedules SET next_run_at = $1`, start)
		require.NoError(t, err)
		fired, err := b.store.FireDue(ctx, start, 100, func(s *jobstore.Schedule) jobstore.Fire { return planEvery(s, start) })
		require.NoError(t, err)
		require.Len(t, fired, 20)
		for _, f := range fired {
			require.False(t, f.Inserted)
		}
	})

	t.Run("HistoryPages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		start := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
		sc, err := b.store.CreateSchedule(ctx, newSchedule("pages", start))
		require.NoError(t, err)
		for k := range 5 {
			now := start.Add(time.Duration(k) * time.Second)
			_, err := b.store.FireDue(ctx, now, 10, func(s *jobstore.Schedule) jobstore.Fire { return planEvery(s, now) })
			require.NoError(t, err)
		}
		seen := map[uuid.UUID]bool{}
		var after *jobstore.HistoryCursor
		for range 3 {
			page, err := b.store.ScheduleJobs(ctx, sc.ID, after, 2)
			require.NoError(t, err)
			for _, j := range page {
				require.False(t, seen[j.ID])
				seen[j.ID] = true
			}
			if len(page) < 2 {
				break
			}
			last := page[len(page)-1]
			after = &jobstore.HistoryCursor{SubmittedAt: last.SubmittedAt, ID: last.ID}
		}
		require.Len(t, seen, 5)
		// Deleting the schedule keeps its jobs.
		require.NoError(t, b.store.DeleteSchedule(ctx, sc.ID))
		page, err := b.store.ScheduleJobs(ctx, sc.ID, nil, 10)
		require.NoError(t, err)
		require.Len(t, page, 5)
	})
}
