package jobstore_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// setKeyLimits sets topic's per-key limits (perKey 0: no cap).
func setKeyLimits(t *testing.T, b *testBundle, topic string, perKey int, onFailure string) {
	t.Helper()
	kl := jobstore.KeyLimits{SequenceOnFailure: onFailure}
	if perKey > 0 {
		kl.MaxRunningPerKey = &perKey
	}
	_, err := b.store.SetTopicKeyLimits(ctx, topic, kl, "alice")
	require.NoError(t, err)
}

// insertFlow inserts n jobs of topic with the given concurrency and
// sequence keys ("" none), in one batch, in order.
func insertFlow(t *testing.T, b *testBundle, topic, ckey, skey string, n int) []pulsetype.NewJob {
	t.Helper()
	jobs := make([]pulsetype.NewJob, n)
	for i := range jobs {
		jobs[i] = newJob(topic, 5)
		jobs[i].ConcurrencyKey, jobs[i].SequenceKey = ckey, skey
	}
	_, err := b.store.Insert(ctx, jobs)
	require.NoError(t, err)
	return jobs
}

// lanesOf counts claimed jobs by concurrency key ("" none).
func lanesOf(t *testing.T, b *testBundle, claimed []pulsetype.Claimed) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, c := range claimed {
		var key string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT COALESCE(concurrency_key, '') FROM jobs WHERE id = $1`, c.ID).Scan(&key))
		out[key]++
	}
	return out
}

func TestKeyedClaimCapsEachKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setKeyLimits(t, b, "kt", 2, "")
	insertFlow(t, b, "kt", "a", "", 10)
	insertFlow(t, b, "kt", "b", "", 10)
	insertFlow(t, b, "kt", "", "", 3)
	insertJobs(t, b, "open", 5, 4)

	got, err := b.store.Claim(ctx, []string{"kt", "open"}, slots("w", 50), ttl)
	require.NoError(t, err)
	byTopic := map[string]int{}
	for _, c := range got {
		byTopic[c.Topic]++
	}
	require.Equal(t, map[string]int{"kt": 7, "open": 4}, byTopic)
	require.Equal(t, map[string]int{"a": 2, "b": 2, "": 3 + 4}, lanesOf(t, b, got))

	again, err := b.store.Claim(ctx, []string{"kt"}, slots("w", 50), ttl)
	require.NoError(t, err)
	require.Empty(t, again, "both keys are at their cap of 2")

	var firstA []pulsetype.Claimed
	for _, c := range got {
		if lanesOf(t, b, []pulsetype.Claimed{c})["a"] == 1 {
			firstA = append(firstA, c)
			break
		}
	}
	require.NoError(t, completeJobs(b, firstA))
	again, err = b.store.Claim(ctx, []string{"kt"}, slots("w", 50), ttl)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 1}, lanesOf(t, b, again), "a finished one, so it may start one")

	// A topic-wide max_running still applies on top of the per-key cap.
	_, err = b.store.SetTopicLimit(ctx, "kt", ptr(4), "alice")
	require.NoError(t, err)
	again, err = b.store.Claim(ctx, []string{"kt"}, slots("w", 50), ttl)
	require.NoError(t, err)
	require.Empty(t, again, "5 running over a max_running of 4")
	info, err := b.store.Topic(ctx, "kt")
	require.NoError(t, err)
	require.Equal(t, 2, *info.MaxRunningPerKey)
	require.Equal(t, 4, *info.MaxRunning)
}

// One slot at a time, the claim takes the keys round-robin, whatever
// their backlog.
func TestKeyedClaimRotatesOverKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setKeyLimits(t, b, "kt", 1000, "")
	insertFlow(t, b, "kt", "big", "", 50)
	for i := range 3 {
		insertFlow(t, b, "kt", fmt.Sprintf("small%d", i), "", 2)
	}
	var order []string
	for range 12 {
		got, err := b.store.Claim(ctx, []string{"kt"}, slots("w", 1), ttl)
		require.NoError(t, err)
		require.Len(t, got, 1)
		for k := range lanesOf(t, b, got) {
			order = append(order, k)
		}
	}
	require.Equal(t, []string{"big", "small0", "small1", "small2", "big", "small0", "small1", "small2", "big", "big", "big", "big"}, order)
}
