package jobstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

func TestQueueDepths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 3 {
		insertRow(t, b.pool, rowOpts{Topic: "a"})
	}
	insertRow(t, b.pool, rowOpts{Topic: "a", Status: jobstore.StatusRetrying})
	insertRow(t, b.pool, rowOpts{Topic: "a", Status: jobstore.StatusRunning})
	insertRow(t, b.pool, rowOpts{Topic: "b", Status: jobstore.StatusRunning})
	insertRow(t, b.pool, rowOpts{Topic: "c", Status: jobstore.StatusCompleted})

	got, err := b.store.QueueDepths(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []jobstore.QueueDepth{
		{Topic: "a", Status: jobstore.StatusPending, Jobs: 3},
		{Topic: "a", Status: jobstore.StatusRetrying, Jobs: 1},
		{Topic: "a", Status: jobstore.StatusRunning, Jobs: 1},
		{Topic: "b", Status: jobstore.StatusRunning, Jobs: 1},
	}, got)

	// Finished jobs are never read: the count walks the partial indexes.
	plan := explain(t, b, jobstore.CountsPlanSQL, jobstore.QueueDepthSQL)
	require.Contains(t, plan.text, "jobs_claim_idx")
	require.Contains(t, plan.text, "jobs_expired_lease_idx")
	require.NotContains(t, plan.text, "Seq Scan")
}
