package jobstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// A due job whose concurrency key is at its cap says concurrency_key_full
// with the cap; a job of another key with room does not. A sequenced job
// behind an unfinished one says sequence_blocked by that job, and once
// the job before it finishes it no longer does.
func TestKeyedWaitReasons(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setKeyLimits(t, b, "kw", 1, pulsetype.SequenceBlock)
	full := insertFlow(t, b, "kw", "acme", "", 2)
	got := claimTopics(t, b, []string{"kw"}, 10)
	require.Len(t, got, 1, "one of acme's two at its cap of one")
	free := insertFlow(t, b, "kw", "other", "", 1)

	waiting := full[1].ID
	if got[0].ID == waiting {
		waiting = full[0].ID
	}
	j, err := b.store.Get(ctx, waiting)
	require.NoError(t, err)
	w, err := b.store.ExplainWait(ctx, j)
	require.NoError(t, err)
	require.Equal(t, jobstore.WaitConcurrencyKeyFull, w.Reason)
	require.Equal(t, 1, w.MaxRunningPerKey)

	j, err = b.store.Get(ctx, free[0].ID)
	require.NoError(t, err)
	w, err = b.store.ExplainWait(ctx, j)
	require.NoError(t, err)
	require.NotEqual(t, jobstore.WaitConcurrencyKeyFull, w.Reason, "the other key has room")

	seq := insertFlow(t, b, "kw", "", "order-1", 2)
	j, err = b.store.Get(ctx, seq[1].ID)
	require.NoError(t, err)
	w, err = b.store.ExplainWait(ctx, j)
	require.NoError(t, err)
	require.Equal(t, jobstore.WaitSequenceBlocked, w.Reason)
	require.NotNil(t, w.BlockedBy)
	require.Equal(t, seq[0].ID, *w.BlockedBy)

	j, err = b.store.Get(ctx, seq[0].ID)
	require.NoError(t, err)
	w, err = b.store.ExplainWait(ctx, j)
	require.NoError(t, err)
	require.NotEqual(t, jobstore.WaitSequenceBlocked, w.Reason, "the head waits for nothing of its sequence")

	// The head runs and finishes: the next is its sequence's head.
	var head []pulsetype.Claimed
	for _, c := range claimTopics(t, b, []string{"kw"}, 10) {
		if c.ID == seq[0].ID {
			head = append(head, c)
		}
		require.NotEqual(t, seq[1].ID, c.ID, "never two of one sequence")
	}
	require.Len(t, head, 1, "the sequence's head starts")
	complete(t, b, head)
	j, err = b.store.Get(ctx, seq[1].ID)
	require.NoError(t, err)
	require.Equal(t, pulsetype.StatusPending, j.Status)
	w, err = b.store.ExplainWait(ctx, j)
	require.NoError(t, err)
	require.NotEqual(t, jobstore.WaitSequenceBlocked, w.Reason, "its head finished")
}
