package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
)

// outage is how long the downstream fails in the breaker's scenario,
// measured from the first attempt: the scenario's length, never a bound
// on any wait.
const outage = 30 * time.Second

// TestBreakerRidesOutAnOutage: on a real fleet with a breaker on its
// topic (failure ratio 0.5 over at least 20 attempts in a minute, 3 s
// cooldown), a handler whose downstream fails 90 % of attempts (every
// attempt but each tenth) for 30 s from the first attempt and then heals
// by itself, while a producer submits steadily. During the outage the
// reaper opens the breaker: the topic is paused by actor breaker, audited,
// its reason naming the breaker, expiring after the cooldown; the metric
// and GET /v1/breakers show it open. No claim takes a job of the topic
// while it is paused; each cooldown ends in a half-open trial, one attempt
// at a time (judged at every claim's commit), and trials during the
// outage open it again. After the outage a trial completes, the breaker
// closes, the backlog drains, and every job submitted ends completed or
// dead-lettered: none is lost or left behind.
func TestBreakerRidesOutAnOutage(t *testing.T) {
	t.Parallel()
	f := upPauseFleet(t, localfleet.Options{Reaper: true, Env: map[string]string{"PULSE_BREAKER_INTERVAL": "200ms"}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	require.NoError(t, claimwitness.InstallLimits(ctx, f.pool))
	const topic = "e2e.breaker"
	var got pulsehttp.TopicBreaker
	require.Equal(t, http.StatusOK, f.call(http.MethodPut, f.ControlHTTP+"/v1/topics/"+topic+"/breaker",
		`{"failure_ratio":0.5,"window":"1m","min_volume":20,"cooldown":"3s"}`, "", &got))
	require.Equal(t, "closed", got.State)

	var attempts atomic.Int64
	var firstAttempt atomic.Pointer[time.Time]
	failing := func() bool {
		now := time.Now()
		firstAttempt.CompareAndSwap(nil, &now)
		return time.Since(*firstAttempt.Load()) < outage
	}
	f.startWorkers([]string{topic}, 2, 4, func(ctx context.Context, job *pulse.Job) error {
		if n := attempts.Add(1); failing() && n%10 != 0 {
			return errors.New("downstream: 503 service unavailable")
		}
		return nil
	})

	// A steady producer, 20 jobs/s, each with two attempts so the outage's
	// jobs dead-letter rather than retry for minutes.
	client := f.newClient()
	// It stops between submits (a flag, not a canceled context), so every
	// submit it counts is one whose answer it had.
	var submitted atomic.Int64
	var stopped atomic.Bool
	var producing sync.WaitGroup
	producing.Go(func() {
		for !stopped.Load() && ctx.Err() == nil {
			if _, err := client.Enqueue(ctx, topic, nil, pulse.MaxAttempts(2)); err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			submitted.Add(1)
			_ = pauseSleep(ctx, 50*time.Millisecond)
		}
	})
	stopProducing := func() { stopped.Store(true) }
	defer func() { stopProducing(); producing.Wait() }()

	// Watch the topic's pause as the database shows it: each time the
	// breaker's pause is seen committed, when (the database's clock).
	var mu sync.Mutex
	var seenPaused []time.Time
	var sawOpenList, sawOpenMetric bool
	watchCtx, stopWatching := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watching.Go(func() {
		paused := false
		for watchCtx.Err() == nil {
			var now time.Time
			var p bool
			err := f.pool.QueryRow(watchCtx, `
				SELECT now(), EXISTS (SELECT 1 FROM dispatch_control WHERE scope = $1 AND paused AND actor = 'breaker')`, topic).Scan(&now, &p)
			if err != nil {
				return
			}
			if p && !paused {
				mu.Lock()
				seenPaused = append(seenPaused, now)
				mu.Unlock()
				var list pulsehttp.TopicBreakerList
				if f.call(http.MethodGet, f.ControlHTTP+"/v1/breakers", "", "", &list) == http.StatusOK &&
					len(list.Breakers) == 1 && list.Breakers[0].State == "open" {
					sawOpenList = true
				}
				if f.scrape(f.AdminURLs[localfleet.Reaper], `pulse_breaker_open{topic="`+topic+`"}`) == 1 {
					sawOpenMetric = true
				}
			}
			paused = p
			_ = pauseSleep(watchCtx, 20*time.Millisecond)
		}
	})

	// The outage passes; after it the breaker closes and stays closed.
	require.Eventually(t, func() bool {
		start := firstAttempt.Load()
		if start == nil || time.Since(*start) < outage {
			return false
		}
		var list pulsehttp.TopicBreakerList
		require.Equal(t, http.StatusOK, f.call(http.MethodGet, f.ControlHTTP+"/v1/breakers", "", "", &list))
		return len(list.Breakers) == 1 && list.Breakers[0].State == "closed" && list.Breakers[0].Opens >= 1
	}, 3*time.Minute, 50*time.Millisecond, "the breaker closed after the outage")
	stopProducing()
	producing.Wait()
	require.Eventually(t, func() bool {
		return f.count(`topic = $1 AND status NOT IN ('COMPLETED', 'DEAD_LETTERED')`, topic) == 0
	}, 2*time.Minute, 50*time.Millisecond, "the backlog drained")
	stopWatching()
	watching.Wait()

	// Every job submitted ended, completed or dead-lettered.
	require.Equal(t, int(submitted.Load()), f.count(`topic = $1`, topic), "no job lost")
	completed := f.count(`topic = $1 AND status = 'COMPLETED'`, topic)
	require.Positive(t, completed)

	// Opened during the outage, by the breaker, audited, reason and expiry.
	var opens, firstOpenedDuring int
	require.NoError(t, f.pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE at < $2)
		FROM control_events WHERE scope = $1 AND action = 'pause' AND actor = 'breaker'`,
		topic, firstAttempt.Load().Add(outage)).Scan(&opens, &firstOpenedDuring))
	require.Positive(t, firstOpenedDuring, "the breaker opened during the outage")
	require.GreaterOrEqual(t, opens, 2, "a trial during the outage failed and opened it again")
	var reason string
	var expiryMillis int64
	require.NoError(t, f.pool.QueryRow(ctx, `
		SELECT reason, (extract(epoch FROM until - at) * 1000)::bigint
		FROM control_events WHERE scope = $1 AND action = 'pause' AND actor = 'breaker' ORDER BY at LIMIT 1`, topic).Scan(&reason, &expiryMillis))
	require.Contains(t, reason, "breaker")
	require.InDelta(t, 3000, expiryMillis, 1000, "the pause expires after the cooldown")
	require.True(t, sawOpenList, "GET /v1/breakers showed it open")
	require.True(t, sawOpenMetric, "pulse_breaker_open showed it open")
	require.Zero(t, f.scrape(f.AdminURLs[localfleet.Reaper], `pulse_breaker_open{topic="`+topic+`"}`))

	// While the breaker held the topic, no claim took a job of it: from
	// each pause seen committed to the resume that ended it.
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, seenPaused)
	for _, at := range seenPaused {
		var resumedAt time.Time
		require.NoError(t, f.pool.QueryRow(ctx, `
			SELECT min(at) FROM control_events WHERE scope = $1 AND action = 'resume' AND at > $2`, topic, at).Scan(&resumedAt))
		require.Zero(t, f.count(`topic = $1 AND started_at >= $2 AND started_at < $3`, topic, at, resumedAt),
			"a claim while the breaker held the topic (paused from %s to %s)", at, resumedAt)
	}
	// Half-open means one attempt at a time: the breaker's limit of one
	// held at every claim's commit.
	requireNoClaimOverLimits(ctx, t, f)
	t.Logf("%d jobs: %d completed, %d dead-lettered; the breaker opened %d times (%d pauses seen); %d attempts",
		submitted.Load(), completed, f.count(`topic = $1 AND status = 'DEAD_LETTERED'`, topic), opens, len(seenPaused), attempts.Load())
}
