package jobstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// A completion stores its result in the statement that settles it; a
// failure stores none whatever it carries; Get reads it back byte for
// byte.
func TestReportStoresTheResultWithTheCompletion(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	_, err := store.Insert(t.Context(), []pulsetype.NewJob{newJob("t", 5), newJob("t", 5), newJob("t", 5)})
	require.NoError(t, err)
	claimed, err := store.Claim(t.Context(), []string{"t"}, slots("w", 3), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 3)

	result := []byte(`{"total": 42, "note": "  spaced  as sent ", "n": 1.50}`)
	acks, err := store.Report(t.Context(), "w", []pulsetype.Result{
		{Ref: ref(claimed[0]), Outcome: pulsetype.OutcomeComplete, Result: result},
		{Ref: ref(claimed[1]), Outcome: pulsetype.OutcomeComplete},
		{Ref: ref(claimed[2]), Outcome: pulsetype.OutcomeFail, Error: "boom", Result: []byte(`"ignored"`)},
	})
	require.NoError(t, err)
	for _, a := range acks {
		require.True(t, a.Accepted, a.Reason)
	}

	job, err := store.Get(t.Context(), claimed[0].ID)
	require.NoError(t, err)
	require.Equal(t, pulsetype.StatusCompleted, job.Status)
	require.Equal(t, string(result), string(job.Result), "the result is stored as sent")

	job, err = store.Get(t.Context(), claimed[1].ID)
	require.NoError(t, err)
	require.Nil(t, job.Result)

	job, err = store.Get(t.Context(), claimed[2].ID)
	require.NoError(t, err)
	require.Equal(t, pulsetype.StatusRetrying, job.Status)
	require.Nil(t, job.Result, "a failed attempt stores no result")

	// Listings never carry results.
	page, err := store.List(t.Context(), jobstore.ListFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page, 3)
	for _, j := range page {
		require.Nil(t, j.Result)
	}
}

// The schema's rules on results, through raw SQL no Go code checks: only a
// COMPLETED job has one, it is born without one, a completed job's result
// never changes, and it is at most pulsetype.MaxResultBytes.
func TestSchemaResultOnlyWithCompleted(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	const complete = `UPDATE jobs SET status = 'COMPLETED', lease_until = NULL, finished_at = now(), result = %s WHERE id = $1`
	atCap := `'\x` + strings.Repeat("41", pulsetype.MaxResultBytes) + `'::bytea`
	pastCap := `'\x` + strings.Repeat("41", pulsetype.MaxResultBytes+1) + `'::bytea`
	runRefusals(t, pool, []refusal{
		{"ABirthWithAResultIsRefused", pendingJob,
			`INSERT INTO jobs (id, topic, result) VALUES (gen_random_uuid(), 't', '"x"')`, "jobs_result_only_completed"},
		{"AResultOnARunningJobIsRefused", runningJob, `UPDATE jobs SET result = '"x"' WHERE id = $1`, "jobs_result_only_completed"},
		{"AResultOnAPendingJobIsRefused", pendingJob, `UPDATE jobs SET result = '"x"' WHERE id = $1`, "jobs_result_only_completed"},
		{"AResultWithAFailureIsRefused", runningJob,
			`UPDATE jobs SET status = 'RETRYING', lease_until = NULL, result = '"x"' WHERE id = $1`, "jobs_result_only_completed"},
		{"AResultWithADeadLetterIsRefused", runningJob,
			`UPDATE jobs SET status = 'DEAD_LETTERED', lease_until = NULL, finished_at = now(), result = '"x"' WHERE id = $1`, "jobs_result_only_completed"},
		{"AResultWithACancelIsRefused", runningJob,
			`UPDATE jobs SET status = 'CANCELED', lease_until = NULL, finished_at = now(), result = '"x"' WHERE id = $1`, "jobs_result_only_completed"},
		{"ChangingACompletedJobsResultIsRefused", doneJob, `UPDATE jobs SET result = '"forged"' WHERE id = $1`, "jobs_status_transition"},
		{"AResultPastTheCapIsRefused", runningJob, strings.Replace(complete, "%s", pastCap, 1), "jobs_result_size"},
	})

	t.Run("AResultAtTheCapIsStored", func(t *testing.T) {
		id := jobstoretest.MustCreate(t, pool, runningJob)
		tag, err := pool.Exec(t.Context(), strings.Replace(complete, "%s", atCap, 1), id)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
	})
	t.Run("RetentionDeletesTheResultWithItsJob", func(t *testing.T) {
		id := jobstoretest.MustCreate(t, pool, runningJob)
		_, err := pool.Exec(t.Context(), strings.Replace(complete, "%s", `'"kept"'`, 1), id)
		require.NoError(t, err)
		_, err = pool.Exec(t.Context(), `DELETE FROM jobs WHERE id = $1`, id)
		require.NoError(t, err)
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE id = $1`, id).Scan(&n))
		require.Zero(t, n)
	})
}

// A settle notifies pulse_jobs_settled with the ids it finished while a
// listener is registered in settle_listeners, and not at all while none
// is: the waiters' wake costs a settle nothing when nobody waits.
func TestSettleNotifiesOnlyWhileSomeoneWaits(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	conn, err := pgx.ConnectConfig(t.Context(), pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(t.Context()) })
	_, err = conn.Exec(t.Context(), "LISTEN "+jobstore.SettledChannel)
	require.NoError(t, err)

	settle := func(outcomes ...pulsetype.Outcome) []string {
		jobs := make([]pulsetype.NewJob, len(outcomes))
		for i := range jobs {
			jobs[i] = newJob("t", 5)
			jobs[i].MaxAttempts = 2
		}
		_, err := store.Insert(t.Context(), jobs)
		require.NoError(t, err)
		claimed, err := store.Claim(t.Context(), []string{"t"}, slots("w", len(jobs)), time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, len(jobs))
		results := make([]pulsetype.Result, len(claimed))
		var finished []string
		for i, c := range claimed {
			results[i] = pulsetype.Result{Ref: ref(c), Outcome: outcomes[i], Error: "e"}
			if outcomes[i] != pulsetype.OutcomeFail {
				finished = append(finished, c.ID.String())
			}
		}
		_, err = store.Report(t.Context(), "w", results)
		require.NoError(t, err)
		return finished
	}
	// A marker notification proves the connection has seen everything
	// sent before it: notifications arrive in commit order.
	drain := func() []string {
		_, err := pool.Exec(t.Context(), `SELECT pg_notify($1, 'marker')`, jobstore.SettledChannel)
		require.NoError(t, err)
		var got []string
		for {
			n, err := conn.WaitForNotification(t.Context())
			require.NoError(t, err)
			if n.Payload == "marker" {
				return got
			}
			got = append(got, strings.Split(n.Payload, ",")...)
		}
	}

	settle(pulsetype.OutcomeComplete, pulsetype.OutcomeFailPermanent)
	require.Empty(t, drain(), "nobody waits: no notification")

	require.NoError(t, store.RegisterSettleListener(t.Context(), "control-api-1", time.Minute))
	finished := settle(pulsetype.OutcomeComplete, pulsetype.OutcomeFail, pulsetype.OutcomeFailPermanent)
	require.ElementsMatch(t, finished, drain(), "the finished jobs, not the one that will retry")

	// More than one payload's worth: several notifications, every id once.
	outcomes := make([]pulsetype.Outcome, 450)
	for i := range outcomes {
		outcomes[i] = pulsetype.OutcomeComplete
	}
	finished = settle(outcomes...)
	require.ElementsMatch(t, finished, drain())

	require.NoError(t, store.UnregisterSettleListener(t.Context(), "control-api-1"))
	settle(pulsetype.OutcomeComplete)
	require.Empty(t, drain())
}

func ref(c pulsetype.Claimed) pulsetype.AttemptRef {
	return pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}
}
