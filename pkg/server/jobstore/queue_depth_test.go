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
	for range 3 {
		insertRow(t, b.pool, rowOpts{Topic: "a"})
	}
	insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusRetrying})
	insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusRunning})
	insertRow(t, b.pool, rowOpts{Topic: "b", Status: pulsetype.StatusRunning})
	insertRow(t, b.pool, rowOpts{Topic: "c", Status: pulsetype.StatusCompleted})

	got, err := b.store.QueueDepths(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []jobstore.QueueDepth{
		{Topic: "a", Status: pulsetype.StatusPending, Jobs: 3},
		{Topic: "a", Status: pulsetype.StatusRetrying, Jobs: 1},
		{Topic: "a", Status: pulsetype.StatusRunning, Jobs: 1},
		{Topic: "b", Status: pulsetype.StatusRunning, Jobs: 1},
	}, got)

	// Finished jobs are never read: the count walks the partial indexes.
	plan := explain(t, b, jobstore.CountsPlanSQL, jobstore.QueueDepthSQL)
	require.Contains(t, plan.text, "jobs_claim_idx")
	require.Contains(t, plan.text, "jobs_expired_lease_idx")
	require.NotContains(t, plan.text, "Seq Scan")
}
