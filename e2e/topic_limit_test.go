package e2e_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
)

// TestTopicLimitHoldsAcrossGateways: three gateways, eight workers with
// far more slots than the limit, each serving a limited and an unlimited
// topic (so every claim is a mixed group), and a backlog of both. Judged in
// the database at every claim's commit (claimwitness): jobs of the limited
// topic never ran more than its limit, on all replicas together, while the
// limit was reached. Then the limit is raised through PUT /v1/topics and
// more jobs of the topic run at once.
func TestTopicLimitHoldsAcrossGateways(t *testing.T) {
	t.Parallel()
	f := upPauseFleet(t, localfleet.Options{Gateways: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, claimwitness.InstallLimits(ctx, f.pool))

	const limited, open = "e2e.limited", "e2e.open"
	setLimit := func(n int) {
		t.Helper()
		var got pulsehttp.Topic
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, f.ControlHTTP+"/v1/topics/"+limited,
			`{"max_running":`+strconv.Itoa(n)+`}`, "", &got))
		require.Equal(t, int32(n), *got.MaxRunning)
	}
	setLimit(3)

	client := f.newClient()
	f.enqueue(ctx, client, limited, 300)
	f.enqueue(ctx, client, open, 300)
	f.startWorkers([]string{limited, open}, 8, 4, func(ctx context.Context, job *pulse.Job) error {
		if job.Topic == limited {
			return pauseSleep(ctx, 100*time.Millisecond)
		}
		return pauseSleep(ctx, 5*time.Millisecond)
	})

	// Under the limit of 3, with 32 slots asking, until the topic has been
	// at its limit at a claim's commit many times.
	require.Eventually(t, func() bool {
		n, top, err := claimwitness.LimitedClaims(ctx, f.pool, limited)
		require.NoError(t, err)
		return n >= 20 && top == 3
	}, time.Minute, 20*time.Millisecond)
	require.Positive(t, f.count(`topic = $1 AND status = 'COMPLETED'`, open), "the unlimited topic ran beside it")

	setLimit(9)
	// Raised: more run at once, from the next claim (the change wakes the
	// gateways), not after the backlog is worked off.
	require.Eventually(t, func() bool {
		return f.count(`topic = $1 AND status = 'RUNNING'`, limited) > 3
	}, 30*time.Second, 5*time.Millisecond)

	requireNoClaimOverLimits(ctx, t, f)
	n, top, err := claimwitness.LimitedClaims(ctx, f.pool, limited)
	require.NoError(t, err)
	t.Logf("%d claims of %s judged, at most %d running at a commit", n, limited, top)
	require.Greater(t, top, int64(3), "the raised limit let more run")
	served := 0
	for _, url := range f.gatewayAdmins() {
		if f.scrape(url, `pulse_jobs_dispatched_total{topic="`+limited+`"}`) > 0 {
			served++
		}
	}
	require.GreaterOrEqual(t, served, 2, "the limit held across gateways that all claimed the topic")
}

// TestTopicLimitFreedRoomIsUsedAtOnce: a limited topic whose jobs take
// milliseconds, a backlog far above its limit, and gateways that poll once
// a minute. A claim at the limit comes back short and the gateways treat
// the topic as exhausted; what wakes them is the report that settles a job
// of the topic (a NOTIFY at its commit). Without it the backlog would wait
// a poll tick per two jobs; with it the whole backlog runs, and the limit
// holds at every claim's commit.
func TestTopicLimitFreedRoomIsUsedAtOnce(t *testing.T) {
	t.Parallel()
	f := upPauseFleet(t, localfleet.Options{Gateways: 2, Env: map[string]string{"PULSE_POLL_INTERVAL": "1m"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, claimwitness.InstallLimits(ctx, f.pool))

	const topic, jobs = "e2e.limited.fast", 80
	var got pulsehttp.Topic
	require.Equal(t, http.StatusOK, f.call(http.MethodPut, f.ControlHTTP+"/v1/topics/"+topic, `{"max_running":2}`, "", &got))
	f.enqueue(ctx, f.newClient(), topic, jobs)
	began := time.Now()
	f.startWorkers([]string{topic}, 2, 8, func(ctx context.Context, job *pulse.Job) error {
		return pauseSleep(ctx, 2*time.Millisecond)
	})

	require.Eventually(t, func() bool {
		return f.count(`topic = $1 AND status = 'COMPLETED'`, topic) == jobs
	}, 90*time.Second, 20*time.Millisecond, "the backlog of a limited topic ran without waiting for poll ticks")
	requireNoClaimOverLimits(ctx, t, f)
	n, top, err := claimwitness.LimitedClaims(ctx, f.pool, topic)
	require.NoError(t, err)
	require.Equal(t, int64(2), top, "the topic ran at its limit")
	t.Logf("%d jobs at a limit of 2 in %s; %d claims of %s judged, at most %d running at a commit",
		jobs, time.Since(began).Round(time.Millisecond), n, topic, top)
}

// requireNoClaimOverLimits fails the test for every claim that committed
// with a limited topic over its limit (claimwitness.InstallLimits).
func requireNoClaimOverLimits(ctx context.Context, t *testing.T, f *pauseFleet) {
	t.Helper()
	over, err := claimwitness.OverLimits(ctx, f.pool)
	require.NoError(t, err)
	for _, o := range over {
		t.Errorf("over the limit: %s", o)
	}
}
