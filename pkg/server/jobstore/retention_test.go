package jobstore_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
)

// insertFinished builds a terminal row that finished ago before now. A
// finished row is frozen (migration 00005), so the job is born backdated and
// every step of its life carries its own past time.
func insertFinished(t *testing.T, pool *pgxpool.Pool, status pulsetype.Status, ago time.Duration) uuid.UUID {
	t.Helper()
	require.True(t, status.Terminal())
	finished := time.Now().Add(-ago)
	return jobstoretest.MustCreate(t, pool, jobstoretest.Spec{
		Status:      status,
		Attempts:    1,
		SubmittedAt: finished.Add(-time.Minute),
		StartedAt:   finished.Add(-30 * time.Second),
		FinishedAt:  finished,
	})
}

func remaining(t *testing.T, pool *pgxpool.Pool) map[uuid.UUID]bool {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT id FROM jobs`)
	require.NoError(t, err)
	defer rows.Close()
	ids := map[uuid.UUID]bool{}
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		ids[id] = true
	}
	require.NoError(t, rows.Err())
	return ids
}

func TestDeleteFinished(t *testing.T) {
	t.Parallel()

	t.Run("DeletesOnlyOldEnoughRowsOfTheGivenStatus", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		oldCompleted := insertFinished(t, b.pool, pulsetype.StatusCompleted, 2*time.Hour)
		freshCompleted := insertFinished(t, b.pool, pulsetype.StatusCompleted, time.Minute)
		oldCanceled := insertFinished(t, b.pool, pulsetype.StatusCanceled, 2*time.Hour)
		oldDead := insertFinished(t, b.pool, pulsetype.StatusDeadLettered, 2*time.Hour)

		n, err := b.store.DeleteFinished(ctx, pulsetype.StatusCompleted, time.Hour, 100)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		left := remaining(t, b.pool)
		require.False(t, left[oldCompleted])
		require.True(t, left[freshCompleted])
		require.True(t, left[oldCanceled])
		require.True(t, left[oldDead])

		n, err = b.store.DeleteFinished(ctx, pulsetype.StatusDeadLettered, time.Hour, 100)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		left = remaining(t, b.pool)
		require.False(t, left[oldDead])
		require.True(t, left[oldCanceled])
	})

	t.Run("NeverDeletesALiveJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		long := time.Now().Add(-30 * 24 * time.Hour)
		live := []uuid.UUID{
			insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusPending, SubmittedAt: long}),
			insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusRunning, SubmittedAt: long}),
			insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusRetrying, SubmittedAt: long}),
		}
		for _, s := range []pulsetype.Status{pulsetype.StatusCompleted, pulsetype.StatusCanceled, pulsetype.StatusDeadLettered} {
			_, err := b.store.DeleteFinished(ctx, s, 0, 1000)
			require.NoError(t, err)
		}
		for _, s := range []pulsetype.Status{pulsetype.StatusPending, pulsetype.StatusRunning, pulsetype.StatusRetrying, "BOGUS"} {
			_, err := b.store.DeleteFinished(ctx, s, 0, 1000)
			require.ErrorIs(t, err, apierr.ErrInvalidArgument, "status %s", s)
			require.Equal(t, "status", apierr.FieldOf(err))
		}
		left := remaining(t, b.pool)
		require.Len(t, left, len(live))
		for _, id := range live {
			require.True(t, left[id])
		}
	})

	t.Run("DeletesAtMostLimitRowsPerCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for range 25 {
			insertFinished(t, b.pool, pulsetype.StatusCompleted, 48*time.Hour)
		}
		var got []int64
		for range 4 {
			n, err := b.store.DeleteFinished(ctx, pulsetype.StatusCompleted, 24*time.Hour, 10)
			require.NoError(t, err)
			got = append(got, n)
		}
		require.Equal(t, []int64{10, 10, 5, 0}, got)
		require.Empty(t, remaining(t, b.pool))
	})

	// A pass's later batches start where the one before stopped: a job
	// that finished before the cursor is left to the next pass, which
	// starts from the oldest; the cursor is the latest finished_at deleted,
	// and stays where it was when a batch deletes nothing.
	t.Run("ResumesFromWhereTheLastBatchStopped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ids []uuid.UUID
		for i := range 6 {
			ids = append(ids, insertFinished(t, b.pool, pulsetype.StatusCompleted, time.Duration(10-i)*time.Hour))
		}
		finishedAt := func(id uuid.UUID) time.Time {
			var at time.Time
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT finished_at FROM jobs WHERE id = $1`, id).Scan(&at))
			return at
		}
		thirdAt, sixthAt := finishedAt(ids[2]), finishedAt(ids[5])

		n, next, err := b.store.DeleteFinishedFrom(ctx, pulsetype.StatusCompleted, time.Hour, 3, time.Time{})
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		require.True(t, next.Equal(thirdAt), "the cursor is the third job's finished_at %s, got %s", thirdAt, next)

		late := insertFinished(t, b.pool, pulsetype.StatusCompleted, 20*time.Hour) // before the cursor
		n, next, err = b.store.DeleteFinishedFrom(ctx, pulsetype.StatusCompleted, time.Hour, 10, next)
		require.NoError(t, err)
		require.EqualValues(t, 3, n, "the rest after the cursor, not the job before it")
		require.True(t, next.Equal(sixthAt), "the cursor is the sixth job's finished_at %s, got %s", sixthAt, next)
		require.Equal(t, map[uuid.UUID]bool{late: true}, remaining(t, b.pool))

		again, stay, err := b.store.DeleteFinishedFrom(ctx, pulsetype.StatusCompleted, time.Hour, 10, next)
		require.NoError(t, err)
		require.Zero(t, again)
		require.True(t, stay.Equal(next), "a batch that deletes nothing keeps the cursor")

		n, _, err = b.store.DeleteFinishedFrom(ctx, pulsetype.StatusCompleted, time.Hour, 10, time.Time{})
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the next pass, from the oldest, takes it")
		require.Empty(t, remaining(t, b.pool))
	})

	t.Run("RefusesABadLimitOrAge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.store.DeleteFinished(ctx, pulsetype.StatusCompleted, time.Hour, 0)
		require.ErrorIs(t, err, apierr.ErrInvalidArgument)
		require.Equal(t, "limit", apierr.FieldOf(err))
		_, err = b.store.DeleteFinished(ctx, pulsetype.StatusCompleted, -time.Hour, 10)
		require.ErrorIs(t, err, apierr.ErrInvalidArgument)
		require.Equal(t, "older_than", apierr.FieldOf(err))
	})
}
