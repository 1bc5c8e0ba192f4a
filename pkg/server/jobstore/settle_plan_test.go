package jobstore_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// TestSettlePlansLookUpEachID: a report or heartbeat finds each job by its
// primary key in the generic plan a connection keeps,
// even when the statistics were taken while no job ran (a fresh fleet, and
// the benchmark after its latency run). Allowed the partial index of
// RUNNING rows, the planner walked every running job once per result.
func TestSettlePlansLookUpEachID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 300 {
		insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusCompleted, Attempts: 1})
	}
	_, err := b.pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)
	// After the statistics: a backlog, a thousand of it running.
	jobs := make([]pulsetype.NewJob, 5000)
	for i := range jobs {
		jobs[i] = newJob("settle", 5)
	}
	_, err = b.store.Insert(ctx, jobs)
	require.NoError(t, err)
	claimed, err := b.store.Claim(ctx, []string{"settle"}, slots("w", 1000), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1000)

	n := 100
	workers, ids, attempts, outcomes, errs, after := make([]string, n), make([]uuid.UUID, n), make([]int32, n), make([]int16, n), make([]string, n), make([]int64, n)
	for i := range n {
		workers[i], ids[i], attempts[i], outcomes[i] = "w", claimed[i].ID, 1, int16(pulsetype.OutcomeComplete)
	}
	// PinnedPlanSQL makes every execution use the generic plan a
	// connection keeps (plan_cache_mode force_generic_plan): that plan is
	// the one that must look each id up.
	report := explain(t, b, jobstore.PinnedPlanSQL, jobstore.ReportSQL, workers, ids, attempts, outcomes, errs, after, make([][]byte, n), "gw-1")
	beat := explain(t, b, jobstore.PinnedPlanSQL, jobstore.HeartbeatSQL, "w", ids, attempts, "30 seconds")
	for name, p := range map[string]plan{"report": report, "heartbeat": beat} {
		require.NotContains(t, p.nodes(), "Index Scan jobs_expired_lease_idx", "%s walks every running job: %s", name, p.text)
		require.Contains(t, p.nodes(), "Index Scan jobs_pkey", "%s: %s", name, p.text)
	}
}
