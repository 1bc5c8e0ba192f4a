package jobstore_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// The fairness bound (ADR-0054), judged on the commit-ordered start log:
// one key with a large backlog and nine small ones, claimed by concurrent
// loops of one and of many slots on two stores (two gateways). After
// every claim's commit, no key has started more than one job more than
// any key that still has jobs to start. PULSE_TEST_FAIRNESS_FULL=1 runs
// the full size: 100,000 and nine times 100.
func TestKeyedFairnessBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big, small := 1500, 15
	if os.Getenv("PULSE_TEST_FAIRNESS_FULL") == "1" {
		big, small = 100_000, 100
	}
	require.NoError(t, claimwitness.InstallLimits(ctx, b.pool))
	setKeyLimits(t, b, "fair", 1_000_000, "")
	total := map[string]int{"big": big}
	for n := big; n > 0; n -= 5000 {
		insertFlow(t, b, "fair", "big", "", min(n, 5000))
	}
	for i := range 9 {
		k := fmt.Sprintf("small%d", i)
		insertFlow(t, b, "fair", k, "", small)
		total[k] = small
	}
	all := big + 9*small

	stores := []*jobstore.Store{b.store, newStore(t, b.pool)}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	var mu sync.Mutex
	started := 0
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			st := stores[w%len(stores)]
			for {
				mu.Lock()
				done := started >= all
				mu.Unlock()
				if done {
					return
				}
				n := 1
				if w%2 == 1 {
					n = 1 + rng.IntN(50)
				}
				got, ok := claimThenComplete(t, b, st, []string{"fair"}, slots(fmt.Sprintf("w%d", w), n))
				if !ok {
					return
				}
				mu.Lock()
				started += len(got)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	starts, err := claimwitness.KeyStarts(ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, starts, all, "every job started once")
	count := map[string]int{}
	claims, worst := 0, 0
	for i, s := range starts {
		count[s.ConcurrencyKey]++
		if i+1 < len(starts) && starts[i+1].Xid == s.Xid {
			continue // judge at the commit, after all of its starts
		}
		claims++
		for a, na := range count {
			for bk, nb := range total {
				if count[bk] < nb && na > count[bk]+1 {
					t.Fatalf("after commit %d: key %s started %d, key %s only %d with jobs left", s.Xid, a, na, bk, count[bk])
				}
				if count[bk] < nb {
					worst = max(worst, na-count[bk])
				}
			}
		}
	}
	t.Logf("%d starts in %d claims; the most any key was ahead of one with jobs left: %d", len(starts), claims, worst)
	require.Greater(t, claims, 20, "the load ran as many claims")
}

// The per-key cap at every claim's commit, under concurrent claimers on
// two stores; then the same judge on claims made with the cap taken out
// of the statement, which it must catch.
func TestKeyedCapJudgedAtEveryCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, claimwitness.InstallLimits(ctx, b.pool))
	setKeyLimits(t, b, "kc", 2, "")
	for i := range 4 {
		insertFlow(t, b, "kc", fmt.Sprintf("k%d", i), "", 30)
	}
	stores := []*jobstore.Store{b.store, newStore(t, b.pool)}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := stores[w%len(stores)]
			for range 40 {
				got, err := st.Claim(ctx, []string{"kc"}, slots(fmt.Sprintf("w%d", w), 1+w*3), ttl)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				// Complete every other claim's jobs, so keys sit at their cap
				// and leave it.
				if len(got) > 0 && got[0].ID[15]%2 == 0 {
					if err := completeJobs(b, got); err != nil {
						t.Errorf("complete: %v", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	starts, err := claimwitness.KeyStarts(ctx, b.pool)
	require.NoError(t, err)
	require.NotEmpty(t, starts)
	atCap := 0
	for _, s := range starts {
		require.Empty(t, s.Violation())
		if s.KeyRunning == 2 {
			atCap++
		}
	}
	require.Positive(t, atCap, "claims reached the cap")
	t.Logf("%d starts, %d of them leaving their key at its cap, none over", len(starts), atCap)

	// The cap taken out of the statement: the judge sees it.
	mutant := strings.Replace(jobstore.ClaimLimitedSQL, "WHEN k.per_key IS NULL THEN k.room", "WHEN true THEN k.room", 1)
	require.NotEqual(t, jobstore.ClaimLimitedSQL, mutant)
	setKeyLimits(t, b, "km", 2, "")
	insertFlow(t, b, "km", "x", "", 10)
	_, err = b.store.ClaimLimitedWith(ctx, mutant, []string{"km"}, slots("m", 10), ttl)
	require.NoError(t, err)
	starts, err = claimwitness.KeyStarts(ctx, b.pool)
	require.NoError(t, err)
	violations := 0
	for _, s := range starts {
		if s.Topic == "km" && s.Violation() != "" {
			violations++
		}
	}
	require.Positive(t, violations, "without the cap the judge sees keys over it")
	t.Logf("without the cap: %d starts over it", violations)
}
