package jobstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// A running attempt's lease holder records progress and merges metadata;
// another worker, a stale attempt, or a job that is not running changes
// nothing; what was recorded outlives the attempt.
func TestSetProgressIsFencedLikeAHeartbeat(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	_, err := store.Insert(t.Context(), []pulsetype.NewJob{newJob("t", 5)})
	require.NoError(t, err)
	claimed, err := store.Claim(t.Context(), []string{"t"}, slots("w", 1), time.Minute)
	require.NoError(t, err)
	r := ref(claimed[0])
	pct := func(v int16) *int16 { return &v }

	held, err := store.SetProgress(t.Context(), "w", r, pct(10), []byte(`{"step": "fetch", "rows": 1}`))
	require.NoError(t, err)
	require.True(t, held)
	held, err = store.SetProgress(t.Context(), "w", r, nil, []byte(`{"rows": 2, "note": "x"}`))
	require.NoError(t, err)
	require.True(t, held)
	held, err = store.SetProgress(t.Context(), "w", r, pct(40), nil)
	require.NoError(t, err)
	require.True(t, held)

	for _, bad := range []struct {
		worker string
		ref    pulsetype.AttemptRef
	}{
		{"thief", r},
		{"w", pulsetype.AttemptRef{ID: r.ID, Attempt: r.Attempt + 1}},
	} {
		held, err := store.SetProgress(t.Context(), bad.worker, bad.ref, pct(99), []byte(`{"step": "forged"}`))
		require.NoError(t, err)
		require.False(t, held, "%+v", bad)
	}

	job, err := store.Get(t.Context(), r.ID)
	require.NoError(t, err)
	require.Equal(t, 40, job.Progress)
	require.JSONEq(t, `{"step": "fetch", "rows": 2, "note": "x"}`, string(job.Metadata))

	_, err = store.Report(t.Context(), "w", []pulsetype.Result{{Ref: r, Outcome: pulsetype.OutcomeComplete}})
	require.NoError(t, err)
	held, err = store.SetProgress(t.Context(), "w", r, pct(100), nil)
	require.NoError(t, err)
	require.False(t, held, "a finished attempt takes no more progress")
	job, err = store.Get(t.Context(), r.ID)
	require.NoError(t, err)
	require.Equal(t, 40, job.Progress, "the last report outlives the attempt")

	fresh, err := store.Insert(t.Context(), []pulsetype.NewJob{newJob("t", 5)})
	require.NoError(t, err)
	job, err = store.Get(t.Context(), fresh[0].ID)
	require.NoError(t, err)
	require.Equal(t, -1, job.Progress)
	require.Nil(t, job.Metadata)

	// Merged metadata past its stored cap is refused, naming the field.
	big := `{"a": "` + strings.Repeat("x", pulsetype.MaxMetadataStoredBytes) + `"}`
	_, err = store.Insert(t.Context(), []pulsetype.NewJob{newJob("big", 5)})
	require.NoError(t, err)
	c, err := store.Claim(t.Context(), []string{"big"}, slots("w", 1), time.Minute)
	require.NoError(t, err)
	_, err = store.SetProgress(t.Context(), "w", ref(c[0]), nil, []byte(strings.ReplaceAll(big, "x", "xy")))
	require.ErrorContains(t, err, "metadata")
}

// The schema's rule, through raw SQL: progress and metadata change only
// within one RUNNING attempt — not on a queued or finished job, not in
// the claim that starts an attempt, the report that ends it or a cancel —
// and within their ranges.
func TestSchemaProgressOnlyWithinARunningAttempt(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	runRefusals(t, pool, []refusal{
		{"OnAPendingJob", pendingJob, `UPDATE jobs SET progress = 5 WHERE id = $1`, "jobs_progress_lease_holder_only"},
		{"OnARetryingJob", retryingJob, `UPDATE jobs SET metadata = '{"a": 1}' WHERE id = $1`, "jobs_progress_lease_holder_only"},
		{"OnADeadJob", deadJob, `UPDATE jobs SET progress = 5 WHERE id = $1`, "jobs_progress_lease_holder_only"},
		{"OnACompletedJob", doneJob, `UPDATE jobs SET progress = 5 WHERE id = $1`, "jobs_progress_lease_holder_only"},
		{"InTheClaim", pendingJob, `UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'w',
			lease_until = now() + interval '1 minute', started_at = now(), progress = 0 WHERE id = $1`, "jobs_progress_lease_holder_only"},
		{"InTheReport", runningJob, `UPDATE jobs SET status = 'COMPLETED', lease_until = NULL, finished_at = now(),
			progress = 100 WHERE id = $1`, "jobs_progress_lease_holder_only"},
		{"InACancel", runningJob, `UPDATE jobs SET status = 'CANCELED', lease_until = NULL, finished_at = now(),
			metadata = '{"why": "x"}' WHERE id = $1`, "jobs_progress_lease_holder_only"},
		{"PastTheRange", runningJob, `UPDATE jobs SET progress = 101 WHERE id = $1`, "jobs_progress_range"},
		{"BelowTheRange", runningJob, `UPDATE jobs SET progress = -1 WHERE id = $1`, "jobs_progress_range"},
		{"MetadataNotAnObject", runningJob, `UPDATE jobs SET metadata = '[1]' WHERE id = $1`, "jobs_metadata_object"},
		{"AtBirth", pendingJob, `INSERT INTO jobs (id, topic, metadata) VALUES (gen_random_uuid(), 't', '[]')`, "jobs_metadata_object"},
	})

	t.Run("WithinTheRunningAttemptIsStored", func(t *testing.T) {
		id := jobstoretest.MustCreate(t, pool, runningJob)
		tag, err := pool.Exec(t.Context(), `UPDATE jobs SET progress = 100, metadata = '{"a": 1}' WHERE id = $1`, id)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
	})
}
