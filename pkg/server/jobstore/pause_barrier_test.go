package jobstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// TestNoClaimCommitsAfterPauseCommits races claimers on two topics against
// a stream of pauses (global and per topic, both modes) and judges by
// commit order, not started_at: no claim of a paused scope may commit
// after the pause committed and before the scope was resumed.
func TestNoClaimCommitsAfterPauseCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, claimwitness.Install(ctx, b.pool))
	topics := []string{"exact.a", "exact.b"}
	_, err := b.pool.Exec(ctx, `
INSERT INTO jobs (id, topic)
SELECT gen_random_uuid(), (ARRAY['exact.a', 'exact.b'])[1 + g % 2] FROM generate_series(1, 40000) AS g`)
	require.NoError(t, err)

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var claims atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("w%d", w)
			for runCtx.Err() == nil {
				got, err := b.store.Claim(runCtx, topics, slots(worker, 3), ttl)
				if err != nil && runCtx.Err() == nil {
					t.Errorf("claim: %v", err)
					return
				}
				claims.Add(int64(len(got)))
			}
		}()
	}

	scopes := []string{jobstore.GlobalScope, "exact.a", "exact.b"}
	modes := []jobstore.PauseMode{jobstore.PauseDrain, jobstore.PauseQuiesce}
	const rounds = 60
	for i := range rounds {
		scope := scopes[rng.IntN(len(scopes))]
		res, err := b.store.Pause(ctx, pauseReq(scope, modes[rng.IntN(2)], fmt.Sprintf("round %d", i), "test"))
		require.NoError(t, err)
		require.True(t, res.Changed)
		time.Sleep(time.Duration(rng.IntN(4000)) * time.Microsecond)
		_, err = b.store.Resume(ctx, scope, "test")
		require.NoError(t, err)
		time.Sleep(time.Duration(rng.IntN(4000)) * time.Microsecond)
	}
	stop()
	wg.Wait()

	late, err := claimwitness.LateClaims(ctx, b.pool)
	require.NoError(t, err)
	for _, l := range late {
		t.Errorf("late claim: %s", l)
	}
	seen, pauses, err := claimwitness.Counts(ctx, b.pool)
	require.NoError(t, err)
	require.EqualValues(t, rounds, pauses, "every pause's commit time is known")
	require.GreaterOrEqual(t, seen, claims.Load(), "the witness saw every claim (and some whose caller stopped waiting)")
	require.Positive(t, seen, "claims ran during the pauses")
}
