package jobstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

func TestQueueDepths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insertQueue(t, b)

	got, err := b.store.QueueDepths(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []jobstore.QueueDepth{
		{Topic: "a", Status: pulsetype.StatusPending, Jobs: 3},
		{Topic: "a", Status: pulsetype.StatusRetrying, Jobs: 1},
		{Topic: "a", Status: pulsetype.StatusRunning, Jobs: 1},
		{Topic: "b", Status: pulsetype.StatusRunning, Jobs: 2},
	}, got)

	requireCountsReadNoFinishedJob(t, b, jobstore.QueueDepthSQL)
}

// insertQueue inserts what the counting tests count: topic a with 3
// PENDING, 1 RETRYING and 1 RUNNING job, topic b with 2 RUNNING, and topic
// c with only a COMPLETED one, which no count includes.
func insertQueue(t *testing.T, b *testBundle) {
	t.Helper()
	for range 3 {
		insertRow(t, b.pool, rowOpts{Topic: "a"})
	}
	insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusRetrying})
	insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusRunning})
	insertRow(t, b.pool, rowOpts{Topic: "b", Status: pulsetype.StatusRunning})
	insertRow(t, b.pool, rowOpts{Topic: "b", Status: pulsetype.StatusRunning})
	insertRow(t, b.pool, rowOpts{Topic: "c", Status: pulsetype.StatusCompleted})
}

// requireCountsReadNoFinishedJob requires that the counting statement sql,
// under the settings counts run with, walks only the partial indexes of
// live jobs: finished jobs are never read.
func requireCountsReadNoFinishedJob(t *testing.T, b *testBundle, sql string) {
	t.Helper()
	plan := explain(t, b, jobstore.CountsPlanSQL, sql)
	require.Contains(t, plan.text, "jobs_claim_idx")
	require.Contains(t, plan.text, "jobs_expired_lease_idx")
	require.NotContains(t, plan.text, "Seq Scan")
}
