package jobstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
)

// bulkJob builds a job of topic with args in status.
func bulkJob(t *testing.T, b *testBundle, topic, args string, status pulsetype.Status) uuid.UUID {
	t.Helper()
	spec := jobstoretest.Spec{Topic: topic, Args: args, Status: status}
	if status == pulsetype.StatusDeadLettered {
		spec.MaxAttempts = 1
	}
	return jobstoretest.MustCreate(t, b.pool, spec)
}

func statuses(t *testing.T, b *testBundle, ids ...uuid.UUID) []pulsetype.Status {
	t.Helper()
	out := make([]pulsetype.Status, len(ids))
	for i, id := range ids {
		out[i] = statusOf(t, b.pool, id)
	}
	return out
}

func repeat(s pulsetype.Status, n int) []pulsetype.Status {
	out := make([]pulsetype.Status, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestBulk(t *testing.T) {
	t.Parallel()

	const acme, globex = `{"customer": "acme", "plan": {"tier": "gold"}}`, `{"customer": "globex"}`
	acmeFilter := []byte(`{"customer": "acme"}`)

	t.Run("CancelsOnlyMatchingLiveJobsInBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var match []uuid.UUID
		for range 7 {
			match = append(match, bulkJob(t, b, "mail", acme, pulsetype.StatusPending))
		}
		match = append(match, bulkJob(t, b, "mail", acme, pulsetype.StatusRunning), bulkJob(t, b, "mail", acme, pulsetype.StatusRetrying))
		others := []uuid.UUID{
			bulkJob(t, b, "mail", globex, pulsetype.StatusPending),                  // other args
			bulkJob(t, b, "pdf", acme, pulsetype.StatusPending),                     // other topic
			bulkJob(t, b, "mail", acme, pulsetype.StatusCompleted),                  // finished
			bulkJob(t, b, "mail", `{"customer": "acmeX"}`, pulsetype.StatusPending), // containment, not prefix
		}
		f := jobstore.BulkFilter{Topic: "mail", Args: acmeFilter}

		n, err := b.store.CountMatching(ctx, jobstore.BulkCancel, f)
		require.NoError(t, err)
		require.EqualValues(t, 9, n)

		res, err := b.store.CancelMatching(ctx, f, 3)
		require.NoError(t, err)
		require.EqualValues(t, 9, res.Affected)
		require.Equal(t, 4, res.Batches, "three full batches, then one that finds nothing")
		require.Equal(t, repeat(pulsetype.StatusCanceled, 9), statuses(t, b, match...))
		require.Equal(t, []pulsetype.Status{pulsetype.StatusPending, pulsetype.StatusPending, pulsetype.StatusCompleted, pulsetype.StatusPending},
			statuses(t, b, others...))
		n, err = b.store.CountMatching(ctx, jobstore.BulkCancel, f)
		require.NoError(t, err)
		require.Zero(t, n)

		// Canceled by the bulk action as by the single one: finished, no lease.
		var leased int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND (lease_until IS NOT NULL OR finished_at IS NULL)`, match).Scan(&leased))
		require.Zero(t, leased)
	})

	t.Run("NarrowsToOneStatus", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		running := bulkJob(t, b, "mail", acme, pulsetype.StatusRunning)
		pending := bulkJob(t, b, "mail", acme, pulsetype.StatusPending)
		res, err := b.store.CancelMatching(ctx, jobstore.BulkFilter{Topic: "mail", Status: pulsetype.StatusRunning}, 0)
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Affected)
		require.Equal(t, []pulsetype.Status{pulsetype.StatusCanceled, pulsetype.StatusPending}, statuses(t, b, running, pending))
	})

	t.Run("DeletesOnlyMatchingFinishedJobsInBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var finished []uuid.UUID
		for _, s := range []pulsetype.Status{pulsetype.StatusCompleted, pulsetype.StatusCompleted, pulsetype.StatusCompleted,
			pulsetype.StatusDeadLettered, pulsetype.StatusDeadLettered, pulsetype.StatusCanceled} {
			finished = append(finished, bulkJob(t, b, "etl", acme, s))
		}
		live := []uuid.UUID{
			bulkJob(t, b, "etl", acme, pulsetype.StatusPending),
			bulkJob(t, b, "etl", acme, pulsetype.StatusRunning),
			bulkJob(t, b, "etl", acme, pulsetype.StatusRetrying),
		}
		other := bulkJob(t, b, "mail", acme, pulsetype.StatusCompleted)

		res, err := b.store.DeleteMatching(ctx, jobstore.BulkFilter{Topic: "etl"}, 2)
		require.NoError(t, err)
		require.EqualValues(t, 6, res.Affected)
		require.Equal(t, 4, res.Batches)
		left := remaining(t, b.pool)
		for _, id := range finished {
			require.False(t, left[id])
		}
		for _, id := range append(live, other) {
			require.True(t, left[id])
		}

		// One status of the three.
		dead := bulkJob(t, b, "etl", acme, pulsetype.StatusDeadLettered)
		done := bulkJob(t, b, "etl", acme, pulsetype.StatusCompleted)
		res, err = b.store.DeleteMatching(ctx, jobstore.BulkFilter{Topic: "etl", Status: pulsetype.StatusDeadLettered}, 0)
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Affected)
		left = remaining(t, b.pool)
		require.False(t, left[dead])
		require.True(t, left[done])
	})

	t.Run("RefusesAStatusTheActionCannotActOnAndTouchesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pending := bulkJob(t, b, "etl", acme, pulsetype.StatusPending)
		done := bulkJob(t, b, "etl", acme, pulsetype.StatusCompleted)
		for _, s := range []pulsetype.Status{pulsetype.StatusPending, pulsetype.StatusRunning, pulsetype.StatusRetrying} {
			_, err := b.store.DeleteMatching(ctx, jobstore.BulkFilter{Status: s}, 0)
			require.ErrorIs(t, err, apierr.ErrInvalidArgument, s)
			require.Equal(t, "status", apierr.FieldOf(err))
			require.Contains(t, err.Error(), "delete acts only on finished jobs")
			_, err = b.store.CountMatching(ctx, jobstore.BulkDelete, jobstore.BulkFilter{Status: s})
			require.ErrorIs(t, err, apierr.ErrInvalidArgument, s)
		}
		for _, s := range []pulsetype.Status{pulsetype.StatusCompleted, pulsetype.StatusDeadLettered, pulsetype.StatusCanceled} {
			_, err := b.store.CancelMatching(ctx, jobstore.BulkFilter{Status: s}, 0)
			require.ErrorIs(t, err, apierr.ErrInvalidArgument, s)
			require.Contains(t, err.Error(), "cancel acts only on PENDING, RETRYING or RUNNING jobs")
		}
		require.Equal(t, []pulsetype.Status{pulsetype.StatusPending, pulsetype.StatusCompleted}, statuses(t, b, pending, done))

		// And the schema refuses the delete of a live job whatever the
		// statement (jobs_delete_terminal_only): the store's refusal is not
		// the only guard.
		_, err := b.pool.Exec(ctx, `DELETE FROM jobs WHERE id = $1`, pending)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "jobs_delete_terminal_only", pgErr.ConstraintName)
	})

	t.Run("TakesHostileFilterValuesAsDataNotSQL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		keep := bulkJob(t, b, "mail", acme, pulsetype.StatusPending)
		for _, f := range []jobstore.BulkFilter{
			{Topic: "mail' OR '1'='1"},
			{Topic: "mail", Args: []byte(`{"customer": "x' OR true --"}`)},
			{Topic: "mail", Args: []byte(`{"customer": "acme\"}"}`)},
			{Topic: "mail", Args: []byte(`{"` + strings.Repeat("k", 10000) + `": 1}`)},
		} {
			res, err := b.store.CancelMatching(ctx, f, 0)
			require.NoError(t, err, "%.80q", f.Args)
			require.Zero(t, res.Affected)
		}
		require.Equal(t, pulsetype.StatusPending, statusOf(t, b.pool, keep))

		// What validation would have refused (package jobspec), Postgres
		// refuses as the caller's data: nothing changes.
		for _, f := range []jobstore.BulkFilter{
			{Topic: "mail\x00"},
			{Topic: "mail\xff"},
			{Topic: "mail", Args: []byte(`{"a": "\u0000"}`)},
			{Topic: "mail", Args: []byte(`not json`)},
		} {
			_, err := b.store.CancelMatching(ctx, f, 0)
			require.ErrorIs(t, err, apierr.ErrInvalidArgument, "%q", f)
		}
		require.Equal(t, pulsetype.StatusPending, statusOf(t, b.pool, keep))
	})

	t.Run("StopsBetweenBatchesWhenTheCallerGoes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := bulkJob(t, b, "mail", acme, pulsetype.StatusPending)
		gone, cancel := context.WithCancel(ctx)
		cancel()
		_, err := b.store.CancelMatching(gone, jobstore.BulkFilter{Topic: "mail"}, 1)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, pulsetype.StatusPending, statusOf(t, b.pool, id))
	})
}

func TestListByArgsAndFinishedOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := time.Now().Add(-time.Hour)
	// Submitted in one order, dead in the reverse one.
	var ids []uuid.UUID
	for i := range 3 {
		ids = append(ids, jobstoretest.MustCreate(t, b.pool, jobstoretest.Spec{
			Topic: "mail", Args: `{"customer": "acme"}`, Status: pulsetype.StatusDeadLettered, MaxAttempts: 1,
			SubmittedAt: base.Add(time.Duration(i) * time.Minute),
			StartedAt:   base.Add(time.Duration(i) * time.Minute),
			FinishedAt:  base.Add(time.Duration(30-10*i) * time.Minute),
		}))
	}
	jobstoretest.MustCreate(t, b.pool, jobstoretest.Spec{Topic: "mail", Args: `{"customer": "globex"}`, Status: pulsetype.StatusDeadLettered, MaxAttempts: 1})
	jobstoretest.MustCreate(t, b.pool, jobstoretest.Spec{Topic: "mail", Args: `{"customer": "acme"}`}) // pending: not finished

	f := jobstore.ListFilter{Args: []byte(`{"customer": "acme"}`), ByFinished: true, Limit: 2}
	page, err := b.store.List(ctx, f)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[0], ids[1]}, []uuid.UUID{page[0].ID, page[1].ID}, "latest death first")
	f.Before, f.BeforeFinished = &page[1].ID, page[1].FinishedAt
	page, err = b.store.List(ctx, f)
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, ids[2], page[0].ID)

	all, err := b.store.List(ctx, jobstore.ListFilter{Args: []byte(`{"customer": "acme"}`), Limit: 10})
	require.NoError(t, err)
	require.Len(t, all, 4, "three dead and one pending acme job, newest first")
}
