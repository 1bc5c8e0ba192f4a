package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// TestBreakerPausesAFailingTopicThenHeals: a handler whose downstream fails
// 90 % of attempts, on a real fleet with a breaker on its topic. The
// reaper opens the breaker: the topic is paused by actor breaker (audited),
// and no claim that began after the pause was seen takes a job of it. The
// downstream heals; after the cooldown one trial runs (half-open), it
// completes, the breaker closes and the backlog drains.
func TestBreakerPausesAFailingTopicThenHeals(t *testing.T) {
	t.Parallel()
	f := upPauseFleet(t, localfleet.Options{Reaper: true, Env: map[string]string{"PULSE_BREAKER_INTERVAL": "200ms"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "e2e.breaker"
	var got pulsehttp.TopicBreaker
	require.Equal(t, http.StatusOK, f.call(http.MethodPut, f.ControlHTTP+"/v1/topics/"+topic+"/breaker",
		`{"failure_ratio":0.5,"window":"1m","min_volume":20,"cooldown":"3s"}`, "", &got))
	require.Equal(t, "closed", got.State)

	var healthy atomic.Bool
	var attempts atomic.Int64
	f.startWorkers([]string{topic}, 2, 4, func(ctx context.Context, job *pulse.Job) error {
		n := attempts.Add(1)
		if !healthy.Load() && n%10 != 0 {
			return errors.New("downstream: 503 service unavailable")
		}
		return nil
	})
	client := f.newClient()
	producer := f.startProducer(ctx, client, topic, 5)
	defer producer.stop()

	// Open: paused by the breaker, with the cooldown as its expiry.
	var reason string
	require.Eventually(t, func() bool {
		err := f.pool.QueryRow(ctx, `SELECT reason FROM dispatch_control WHERE scope = $1 AND paused AND actor = 'breaker'`, topic).Scan(&reason)
		return err == nil
	}, time.Minute, 20*time.Millisecond)
	seen := f.now()
	require.Contains(t, reason, "attempts failed")
	var audited int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM control_events WHERE scope = $1 AND action = 'pause' AND actor = 'breaker'`, topic).Scan(&audited))
	require.Equal(t, 1, audited)

	healthy.Store(true)
	// Half-open and closed again: the trial completed.
	require.Eventually(t, func() bool {
		var list pulsehttp.TopicBreakerList
		require.Equal(t, http.StatusOK, f.call(http.MethodGet, f.ControlHTTP+"/v1/breakers", "", "", &list))
		return len(list.Breakers) == 1 && list.Breakers[0].State == "closed" && list.Breakers[0].Opens >= 1
	}, time.Minute, 50*time.Millisecond)

	// No claim that began after the pause was seen took a job while the
	// breaker held the topic: every start between then and the breaker's
	// resume is a violation.
	var resumedAt time.Time
	require.NoError(t, f.pool.QueryRow(ctx, `
		SELECT min(at) FROM control_events WHERE scope = $1 AND action = 'resume' AND at > $2`, topic, seen).Scan(&resumedAt))
	require.Zero(t, f.count(`topic = $1 AND started_at >= $2 AND started_at < $3`, topic, seen, resumedAt),
		"claims while the breaker held the topic")

	// Closed, the topic runs freely again and its backlog drains.
	producer.stop()
	require.Eventually(t, func() bool {
		return f.count(`topic = $1 AND status IN ('PENDING', 'RUNNING')`, topic) == 0
	}, time.Minute, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		return f.scrape(f.AdminURLs[localfleet.Reaper], `pulse_breaker_open{topic="`+topic+`"}`) == 0
	}, time.Minute, 50*time.Millisecond)
}
