package jobstore_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// setRate limits the topic rl to n starts per every, counted by key.
func setRate(t *testing.T, b *testBundle, n int, every time.Duration, key string) {
	t.Helper()
	_, err := b.store.SetTopicRateLimit(ctx, "rl", &pulsetype.RateLimit{Limit: n, Interval: every, Key: key}, "alice")
	require.NoError(t, err)
}

// insertKeyed inserts n jobs of topic with the given rate key ("" none)
// and args.
func insertKeyed(t *testing.T, b *testBundle, topic, key, args string, n int) {
	t.Helper()
	jobs := make([]pulsetype.NewJob, n)
	for i := range jobs {
		jobs[i] = newJob(topic, 5)
		jobs[i].RateKey = key
		if args != "" {
			jobs[i].Args = []byte(args)
		}
	}
	_, err := b.store.Insert(ctx, jobs)
	require.NoError(t, err)
}

func keysOf(t *testing.T, b *testBundle, claimed []pulsetype.Claimed) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, c := range claimed {
		var key *string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT rate_key FROM jobs WHERE id = $1`, c.ID).Scan(&key))
		k := ""
		if key != nil {
			k = *key
		}
		out[k]++
	}
	return out
}

func TestRateLimitWholeTopic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insertJobs(t, b, "rl", 5, 10)
	insertJobs(t, b, "open", 5, 10)
	setRate(t, b, 3, time.Hour, pulsetype.RateKeyNone)

	got := claimTopics(t, b, []string{"rl"}, 10)
	require.Len(t, got, 3, "three starts per hour")
	complete(t, b, got)
	require.Empty(t, claimTopics(t, b, []string{"rl"}, 10), "the hour's three are spent, running or not")

	// A group mixing the limited topic with an open one: the open one is
	// served in full, the limited one not at all.
	got = claimTopics(t, b, []string{"rl", "open"}, 20)
	require.Len(t, got, 10)
	for _, c := range got {
		require.Equal(t, "open", c.Topic)
	}

	// Waits report the window's opening: an hour after the first start.
	until, keyed, ok, err := b.store.RateLimitedUntil(ctx, "rl")
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, keyed)
	require.WithinDuration(t, time.Now().Add(time.Hour), until, time.Minute)

	// Clearing the limit lets the rest start at once, and forgets the log.
	_, err = b.store.SetTopicRateLimit(ctx, "rl", nil, "alice")
	require.NoError(t, err)
	require.Len(t, claimTopics(t, b, []string{"rl"}, 10), 7)
	var logged int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM topic_rate_log`).Scan(&logged))
	require.Zero(t, logged)
	var rows int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM topic_limits`).Scan(&rows))
	require.Zero(t, rows, "a topic with no limit left has no row: the hot path's probe finds nothing")
}

func TestRateLimitWithMaxRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insertJobs(t, b, "rl", 5, 10)
	setRate(t, b, 5, time.Hour, pulsetype.RateKeyNone)
	setLimit(t, b, "rl", 2)

	got := claimTopics(t, b, []string{"rl"}, 10)
	require.Len(t, got, 2, "max_running caps below the rate")
	complete(t, b, got)
	got = claimTopics(t, b, []string{"rl"}, 10)
	require.Len(t, got, 2)
	complete(t, b, got)
	require.Len(t, claimTopics(t, b, []string{"rl"}, 10), 1, "the rate's fifth start")

	// Clearing max_running keeps the row and the rate limit.
	_, err := b.store.SetTopicLimit(ctx, "rl", nil, "alice")
	require.NoError(t, err)
	info, err := b.store.Topic(ctx, "rl")
	require.NoError(t, err)
	require.Nil(t, info.MaxRunning)
	require.Equal(t, &pulsetype.RateLimit{Limit: 5, Interval: time.Hour, Key: "none"}, info.RateLimit)
}

// One key at its limit never holds back another key: the walk steps over
// the spent key's jobs, however many are queued ahead of the others.
func TestRateLimitPerKeyIndependence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setRate(t, b, 2, time.Hour, pulsetype.RateKeyJob)
	insertKeyed(t, b, "rl", "big", "", 200)
	insertKeyed(t, b, "rl", "a", "", 5)
	insertKeyed(t, b, "rl", "", "", 5)
	insertKeyed(t, b, "rl", "b", "", 5)

	got := claimTopics(t, b, []string{"rl"}, 50)
	require.Equal(t, map[string]int{"big": 2, "a": 2, "": 2, "b": 2}, keysOf(t, b, got))
	require.Empty(t, claimTopics(t, b, []string{"rl"}, 50), "every key spent its two")

	// A new key submitted behind the big backlog starts at once.
	insertKeyed(t, b, "rl", "late", "", 3)
	got = claimTopics(t, b, []string{"rl"}, 1)
	require.Equal(t, map[string]int{"late": 1}, keysOf(t, b, got))
	got = claimTopics(t, b, []string{"rl"}, 5)
	require.Equal(t, map[string]int{"late": 1}, keysOf(t, b, got))

	until, keyed, ok, err := b.store.RateLimitedUntil(ctx, "rl")
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, keyed)
	require.WithinDuration(t, time.Now().Add(time.Hour), until, time.Minute)
}

// A topic limited by an args field: the key is taken from the field at
// submit (the claim reads jobs.rate_key, never args); a producer's own key
// wins; a missing or empty field is the empty key; a long value is hashed.
func TestRateLimitKeyFromArgs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setRate(t, b, 1, time.Hour, "args:tenant")
	long := strings.Repeat("x", 300)
	insertKeyed(t, b, "rl", "", `{"tenant":"acme"}`, 3)
	insertKeyed(t, b, "rl", "", `{"tenant":"globex","n":1}`, 3)
	insertKeyed(t, b, "rl", "", `{"other":1}`, 2)
	insertKeyed(t, b, "rl", "", `{"tenant":""}`, 2)
	insertKeyed(t, b, "rl", "own", `{"tenant":"acme"}`, 2)
	insertKeyed(t, b, "rl", "", `{"tenant":"`+long+`"}`, 2)
	insertKeyed(t, b, "elsewhere", "", `{"tenant":"acme"}`, 1)

	var hashed string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT 'md5:' || md5($1)`, long).Scan(&hashed))
	got := claimTopics(t, b, []string{"rl"}, 50)
	require.Equal(t, map[string]int{"acme": 1, "globex": 1, "": 1, "own": 1, hashed: 1}, keysOf(t, b, got))
	var elsewhere *string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT rate_key FROM jobs WHERE topic = 'elsewhere'`).Scan(&elsewhere))
	require.Nil(t, elsewhere, "a topic without an args-keyed limit extracts nothing")
}

func TestRateLimitRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		rl    pulsetype.RateLimit
		field string
	}{
		{pulsetype.RateLimit{Limit: 0, Interval: time.Second, Key: "none"}, "rate_limit"},
		{pulsetype.RateLimit{Limit: -1, Interval: time.Second, Key: "none"}, "rate_limit"},
		{pulsetype.RateLimit{Limit: pulsetype.MaxRateLimit + 1, Interval: time.Second, Key: "none"}, "rate_limit"},
		{pulsetype.RateLimit{Limit: 1 << 40, Interval: time.Second, Key: "none"}, "rate_limit"},
		{pulsetype.RateLimit{Limit: 1, Interval: 0, Key: "none"}, "rate_interval"},
		{pulsetype.RateLimit{Limit: 1, Interval: -time.Second, Key: "none"}, "rate_interval"},
		{pulsetype.RateLimit{Limit: 1, Interval: pulsetype.MaxRateInterval + time.Microsecond, Key: "none"}, "rate_interval"},
		{pulsetype.RateLimit{Limit: 1, Interval: time.Second + time.Nanosecond, Key: "none"}, "rate_interval"},
		{pulsetype.RateLimit{Limit: 1, Interval: time.Second, Key: ""}, "rate_key"},
		{pulsetype.RateLimit{Limit: 1, Interval: time.Second, Key: "tenant"}, "rate_key"},
		{pulsetype.RateLimit{Limit: 1, Interval: time.Second, Key: "args:"}, "rate_key"},
		{pulsetype.RateLimit{Limit: 1, Interval: time.Second, Key: "args:" + strings.Repeat("f", 129)}, "rate_key"},
		{pulsetype.RateLimit{Limit: 1, Interval: time.Second, Key: "args:a\x00b"}, "rate_key"},
		{pulsetype.RateLimit{Limit: 1, Interval: time.Second, Key: "args:\xff"}, "rate_key"},
	} {
		_, err := b.store.SetTopicRateLimit(ctx, "rl", &tc.rl, "alice")
		require.Error(t, err, "%+v", tc.rl)
		require.Equal(t, apierr.KindInvalidArgument, apierr.KindOf(err), "%+v: %v", tc.rl, err)
		require.Equal(t, tc.field, apierr.FieldOf(err), "%+v: %v", tc.rl, err)
	}
	_, err := b.store.SetTopicRateLimit(ctx, "bad\x00topic", &pulsetype.RateLimit{Limit: 1, Interval: time.Second, Key: "none"}, "alice")
	require.ErrorContains(t, err, "topic")
	_, err = b.store.SetTopicRateLimit(ctx, "rl", &pulsetype.RateLimit{Limit: 1, Interval: time.Second, Key: "none"}, "")
	require.ErrorContains(t, err, "actor")

	// The schema holds the same bounds: a row typed in psql is refused.
	for _, bad := range []string{
		`INSERT INTO topic_limits (topic, rate_limit, rate_interval, rate_key, updated_by) VALUES ('x', 0, '1s', 'none', 'a')`,
		`INSERT INTO topic_limits (topic, rate_limit, rate_interval, rate_key, updated_by) VALUES ('x', 10001, '1s', 'none', 'a')`,
		`INSERT INTO topic_limits (topic, rate_limit, rate_interval, rate_key, updated_by) VALUES ('x', 1, '0s', 'none', 'a')`,
		`INSERT INTO topic_limits (topic, rate_limit, rate_interval, rate_key, updated_by) VALUES ('x', 1, '25 hours', 'none', 'a')`,
		`INSERT INTO topic_limits (topic, rate_limit, rate_interval, rate_key, updated_by) VALUES ('x', 1, '1s', 'tenant', 'a')`,
		`INSERT INTO topic_limits (topic, rate_limit, updated_by) VALUES ('x', 1, 'a')`,
		`INSERT INTO topic_limits (topic, updated_by) VALUES ('x', 'a')`,
	} {
		_, err := b.pool.Exec(ctx, bad)
		require.Error(t, err, bad)
	}

	// A job's rate key: NUL and invalid UTF-8 are refused naming the
	// field, and so is one past the longest.
	for _, key := range []string{"a\x00b", "\xff", strings.Repeat("k", pulsetype.MaxRateKeyBytes+1)} {
		j := newJob("rl", 5)
		j.RateKey = key
		_, errs := b.store.InsertEach(ctx, []pulsetype.NewJob{j})
		require.Len(t, errs, 1)
		require.Error(t, errs[0])
		require.Contains(t, errs[0].Error(), "rate_key")
	}
	_, err = b.pool.Exec(ctx, `UPDATE jobs SET rate_key = 'other'`)
	require.NoError(t, err, "no jobs yet")
	insertKeyed(t, b, "rl", "k", "", 1)
	_, err = b.pool.Exec(ctx, `UPDATE jobs SET rate_key = 'other'`)
	require.ErrorContains(t, err, "rate_key", "a job's rate key never changes")
}

// The bound, across concurrent claimers on two stores (two gateways):
// in every interval of rate_interval there are at most rate_limit starts
// (by started_at, the claim statement's time), per key, judged on the
// jobs table after the run.
func TestRateLimitIsExactUnderConcurrentClaimers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stores := []*jobstore.Store{b.store, newStore(t, b.pool)}
	const (
		limit = 4
		every = 200 * time.Millisecond
	)
	setRate(t, b, limit, every, pulsetype.RateKeyJob)
	for _, k := range []string{"a", "b", "c"} {
		insertKeyed(t, b, "rl", k, "", 400)
	}
	insertJobs(t, b, "open", 5, 400)

	stop := claimAndComplete(t, b, stores, [][]string{{"rl"}, {"rl", "open"}})
	// Run until every key has started over several windows' worth.
	for {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = 'rl' AND started_at IS NOT NULL`).Scan(&n))
		if n >= 3*limit*6 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()

	over := windowsOverLimit(t, b, "rl", limit, every)
	for _, o := range over {
		t.Errorf("over the limit: %s", o)
	}
	// The same judge on the unlimited topic the claimers served beside
	// it: what the starts look like without the limit.
	unlimited := windowsOverLimit(t, b, "open", limit, every)
	require.NotEmpty(t, unlimited, "without the limit the judge sees windows over it")
	t.Logf("without the limit: %d windows over %d starts per %s", len(unlimited), limit, every)
	var perKey, windows int
	require.NoError(t, b.pool.QueryRow(ctx, `
        SELECT count(DISTINCT rate_key), count(DISTINCT (rate_key, floor(extract(epoch FROM started_at) / $1)))
        FROM jobs WHERE topic = 'rl' AND started_at IS NOT NULL`, every.Seconds()).Scan(&perKey, &windows))
	require.Equal(t, 3, perKey, "every key started")
	t.Logf("%d keys over %d key-windows, %d windows over the limit", perKey, windows, len(over))
}

// windowsOverLimit judges topic's starts on the jobs table: every window
// of length every that holds more than limit starts of one key has a
// first start, so it looks at the window from each start.
func windowsOverLimit(t *testing.T, b *testBundle, topic string, limit int, every time.Duration) []string {
	t.Helper()
	rows, err := b.pool.Query(ctx, `
        SELECT COALESCE(a.rate_key, ''), a.started_at, count(*)
        FROM jobs AS a JOIN jobs AS o
          ON o.topic = a.topic AND o.rate_key IS NOT DISTINCT FROM a.rate_key
         AND o.started_at >= a.started_at AND o.started_at < a.started_at + $2::interval
        WHERE a.topic = $1 AND a.started_at IS NOT NULL
        GROUP BY a.id, a.rate_key, a.started_at
        HAVING count(*) > $3`, topic, fmt.Sprintf("%d microseconds", every.Microseconds()), limit)
	require.NoError(t, err)
	defer rows.Close()
	var over []string
	for rows.Next() {
		var key string
		var at time.Time
		var n int
		require.NoError(t, rows.Scan(&key, &at, &n))
		over = append(over, fmt.Sprintf("key %q: %d starts in the %s from %s", key, n, every, at.Format(time.RFC3339Nano)))
	}
	require.NoError(t, rows.Err())
	return over
}

// A due job whose key has no room says rate_limited until the window
// frees a start of its key; a job of another key with room does not.
func TestRateLimitExplainsTheWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setRate(t, b, 1, time.Hour, pulsetype.RateKeyJob)
	insertKeyed(t, b, "rl", "spent", "", 2)
	got := claimTopics(t, b, []string{"rl"}, 1)
	require.Len(t, got, 1)
	insertKeyed(t, b, "rl", "fresh", "", 1)

	var spent, fresh uuid.UUID
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM jobs WHERE rate_key = 'spent' AND status = 'PENDING'`).Scan(&spent))
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM jobs WHERE rate_key = 'fresh'`).Scan(&fresh))
	var started time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT started_at FROM jobs WHERE id = $1`, got[0].ID).Scan(&started))

	j, err := b.store.Get(ctx, spent)
	require.NoError(t, err)
	w, err := b.store.ExplainWait(ctx, j)
	require.NoError(t, err)
	require.Equal(t, jobstore.WaitRateLimited, w.Reason)
	require.NotNil(t, w.NotBefore)
	require.True(t, w.NotBefore.Equal(started.Add(time.Hour)), "%s, started %s", w.NotBefore, started)

	j, err = b.store.Get(ctx, fresh)
	require.NoError(t, err)
	w, err = b.store.ExplainWait(ctx, j)
	require.NoError(t, err)
	require.NotEqual(t, jobstore.WaitRateLimited, w.Reason, "the other key has room")
}

// A rate-limited topic leaves the claim of unlimited topics as it was:
// the same plan, node for node, before and after another topic gets a
// rate limit and a log. The limited claim of the rate-limited topic walks
// indexes too: no sequential scan (enable_seqscan=off prices one at 1e10).
func TestRateLimitLeavesTheUnlimitedPlanAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insertJobs(t, b, "open", 5, 50)
	insertKeyed(t, b, "rl", "k", "", 50)
	args := []any{[]string{"open"}, 100, slots("w", 100), "30 seconds"}
	before := explain(t, b, jobstore.PinnedPlanSQL, jobstore.ClaimSQL, args...)

	setRate(t, b, 5, time.Hour, pulsetype.RateKeyJob)
	require.Len(t, claimTopics(t, b, []string{"rl"}, 10), 5)
	after := explain(t, b, jobstore.PinnedPlanSQL, jobstore.ClaimSQL, args...)
	require.Equal(t, before.nodes(), after.nodes(), "the unlimited claim's plan changed:\n%s\n%s", before.text, after.text)
	after.requireWalksIndex(t, "CTE picked", "")

	limited := explain(t, b, jobstore.PinnedPlanSQL, jobstore.ClaimLimitedSQL,
		[]any{[]string{"rl", "open"}, 100, slots("w", 100), "30 seconds"}...)
	for _, n := range limited.nodes() {
		require.NotContains(t, n, "Seq Scan", limited.text)
	}
	require.Less(t, limited.cost, 1e9)
	limited.requireWalksIndex(t, "CTE open_head", "")
}

// A batch insert asks once per statement whether any topic takes its rate
// key from args, and reads topic_limits per job only when one does
// (migration 00021): submits to topics without such a limit pay nothing
// per job for the feature.
func TestInsertReadsTopicLimitsPerJobOnlyForArgsKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	jobs := make([]pulsetype.NewJob, 100)
	for i := range jobs {
		jobs[i] = newJob("plain", 5)
	}
	// loops runs the insert under EXPLAIN ANALYZE, rolled back, and counts
	// the scans of topic_limits it ran.
	loops := func() int {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // rolled back on purpose: nothing is inserted
		var raw []byte
		require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+jobstore.InsertRowsSQL,
			jobstore.InsertParams(jobs)...).Scan(&raw))
		var parsed []struct {
			Plan analyzedNode `json:"Plan"`
		}
		require.NoError(t, json.Unmarshal(raw, &parsed))
		return parsed[0].Plan.loopsOn("topic_limits")
	}
	require.LessOrEqual(t, loops(), 1, "no topic takes its key from args: one look per statement")

	_, err := b.store.SetTopicRateLimit(ctx, "other", &pulsetype.RateLimit{Limit: 5, Interval: time.Second, Key: "args:tenant"}, "alice")
	require.NoError(t, err)
	require.GreaterOrEqual(t, loops(), len(jobs), "a topic takes its key from args: each job's topic is looked up")
}

type analyzedNode struct {
	Relation string         `json:"Relation Name"`
	Loops    int            `json:"Actual Loops"`
	Plans    []analyzedNode `json:"Plans"`
}

func (n analyzedNode) loopsOn(relation string) int {
	total := 0
	if n.Relation == relation {
		total += n.Loops
	}
	for _, c := range n.Plans {
		total += c.loopsOn(relation)
	}
	return total
}

// claimAndComplete runs six claim loops over stores, each claiming 1..8
// slots of a random group and completing what it took, until stop.
func claimAndComplete(t *testing.T, b *testBundle, stores []*jobstore.Store, groups [][]string) (stop func()) {
	t.Helper()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			st := stores[w%len(stores)]
			for {
				select {
				case <-done:
					return
				default:
				}
				got, ok := claimThenComplete(t, b, st, groups[rng.IntN(len(groups))], slots(fmt.Sprintf("w%d", w), 1+rng.IntN(8)))
				if !ok {
					return
				}
				if len(got) == 0 {
					time.Sleep(time.Millisecond) // pacing, not waiting for an event
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }
}
