package jobstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// rateMutant is ClaimLimitedSQL with the rate limit taken out: a topic
// limited as a whole gets a room of a million, and a key's starts in the
// window are compared with a million (the two fragments ADR-0051's
// rated and rate_walk check the limit in).
func rateMutant(t *testing.T) string {
	t.Helper()
	m := strings.Replace(jobstore.ClaimLimitedSQL, "GREATEST(l.rate_limit - (", "GREATEST(1000000 - (", 1)
	require.NotEqual(t, jobstore.ClaimLimitedSQL, m, "the whole-topic room is in the statement")
	perKey := strings.NewReplacer(") < r.rate_limit", ") < 1000000", ") < w.rate_limit", ") < 1000000").Replace(m)
	require.NotEqual(t, m, perKey, "the per-key check is in the statement")
	return perKey
}

// Rate limits judged at every claim's commit (claimwitness): concurrent
// claimers on two stores (two gateways), a topic limited as a whole and
// one limited per key, claimed beside an unlimited topic. No start leaves
// a window of rate_interval with more starts of its key than the limit,
// and the judge saw windows at exactly the limit. With the limit taken out
// of the statement, the same judge sees the breaches.
func TestRateLimitJudgedAtEveryCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, claimwitness.InstallLimits(ctx, b.pool))
	const every = 150 * time.Millisecond
	limits := map[string]pulsetype.RateLimit{
		"rw": {Limit: 4, Interval: every, Key: pulsetype.RateKeyNone},
		"rk": {Limit: 3, Interval: every, Key: pulsetype.RateKeyJob},
	}
	for topic, rl := range limits {
		_, err := b.store.SetTopicRateLimit(ctx, topic, &rl, "alice")
		require.NoError(t, err)
	}
	insertJobs(t, b, "rw", 5, 200)
	for _, k := range []string{"a", "b", "c"} {
		insertKeyed(t, b, "rk", k, "", 150)
	}
	insertJobs(t, b, "open", 5, 400)

	stores := []*jobstore.Store{b.store, newStore(t, b.pool)}
	stop := claimAndComplete(t, b, stores, [][]string{{"rw"}, {"rk"}, {"rw", "rk", "open"}, {"rk", "open"}})
	// Run until each limited topic has started several windows' worth.
	for {
		var rw, rk int
		require.NoError(t, b.pool.QueryRow(ctx, `
            SELECT count(*) FILTER (WHERE topic = 'rw'), count(*) FILTER (WHERE topic = 'rk')
            FROM jobs WHERE started_at IS NOT NULL`).Scan(&rw, &rk))
		if rw >= 4*4 && rk >= 3*3*4 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()

	starts, err := claimwitness.RateStarts(ctx, b.pool)
	require.NoError(t, err)
	atLimit := map[string]int{}
	for _, s := range starts {
		require.Empty(t, s.Violation())
		if s.WindowMax == int64(s.RateLimit) {
			atLimit[s.Topic]++
		}
	}
	require.Positive(t, atLimit["rw"], "the whole topic reached its limit in some window")
	require.Positive(t, atLimit["rk"], "some key reached its limit in some window")
	t.Logf("%d rate-limited starts judged at their commits, none over; at the limit: %v", len(starts), atLimit)

	// The limit taken out of the statement: the judge sees it.
	mutant := rateMutant(t)
	for topic, rl := range map[string]pulsetype.RateLimit{
		"mw": {Limit: 2, Interval: time.Hour, Key: pulsetype.RateKeyNone},
		"mk": {Limit: 1, Interval: time.Hour, Key: pulsetype.RateKeyJob},
	} {
		_, err := b.store.SetTopicRateLimit(ctx, topic, &rl, "alice")
		require.NoError(t, err)
	}
	insertJobs(t, b, "mw", 5, 10)
	insertKeyed(t, b, "mk", "x", "", 6)
	got, err := b.store.ClaimLimitedWith(ctx, mutant, []string{"mw", "mk"}, slots("m", 20), ttl)
	require.NoError(t, err)
	require.Len(t, got, 16, "without the limit every due job starts")
	starts, err = claimwitness.RateStarts(ctx, b.pool)
	require.NoError(t, err)
	violations := map[string]int{}
	for _, s := range starts {
		if s.Violation() != "" {
			violations[s.Topic]++
		}
	}
	require.Positive(t, violations["mw"], "without the limit the judge sees the whole topic over it")
	require.Positive(t, violations["mk"], "without the limit the judge sees a key over it")
	t.Logf("without the limit: starts over it %v", violations)
}
