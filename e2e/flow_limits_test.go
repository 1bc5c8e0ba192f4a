package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
)

// TestFlowLimitsHoldAcrossGateways: two gateways, workers on both with
// more slots than any limit, three limited topics set through the HTTP
// API — a rate limit per tenant taken from args, a cap of running jobs per
// concurrency key, and sequences — and a backlog of each. Judged in the
// database at every claim's commit (claimwitness): no window of the rate
// interval held more starts of a tenant than the limit, no key ran more
// than its cap, no two jobs of a sequence ran at once nor out of submit
// order; and the judge saw each limit reached, so the run proved
// something. Every job completed.
func TestFlowLimitsHoldAcrossGateways(t *testing.T) {
	t.Parallel()
	f := upPauseFleet(t, localfleet.Options{Gateways: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, claimwitness.InstallLimits(ctx, f.pool))

	const rated, keyed, sequenced = "e2e.flow.rated", "e2e.flow.keyed", "e2e.flow.sequenced"
	put := func(path, body string) {
		t.Helper()
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, f.ControlHTTP+"/v1/topics/"+path, body, "", nil), "PUT %s %s", path, body)
	}
	put(rated+"/rate-limit", `{"rate_limit":4,"rate_interval":"250ms","rate_key":"args:tenant"}`)
	put(keyed+"/key-limits", `{"max_running_per_key":2}`)
	put(sequenced+"/key-limits", `{"sequence_on_failure":"block"}`)

	var reqs []pulse.JobRequest
	for i := range 16 {
		for _, tenant := range []string{"acme", "globex", "initech"} {
			reqs = append(reqs, pulse.JobRequest{Topic: rated, Args: map[string]any{"tenant": tenant, "i": i}})
		}
	}
	for i := range 12 {
		for _, key := range []string{"k1", "k2", "k3"} {
			reqs = append(reqs, pulse.JobRequest{Topic: keyed, Args: map[string]int{"i": i}, Options: []pulse.EnqueueOption{pulse.ConcurrencyKey(key)}})
		}
	}
	for i := range 10 {
		for _, seq := range []string{"order-1", "order-2"} {
			reqs = append(reqs, pulse.JobRequest{Topic: sequenced, Args: map[string]int{"i": i}, Options: []pulse.EnqueueOption{pulse.SequenceKey(seq)}})
		}
	}
	_, err := f.newClient().EnqueueMany(ctx, reqs)
	require.NoError(t, err)

	f.startWorkers([]string{rated, keyed, sequenced}, 4, 8, func(ctx context.Context, job *pulse.Job) error {
		switch job.Topic {
		case keyed:
			return pauseSleep(ctx, 40*time.Millisecond) // long enough for keys to sit at their cap
		case sequenced:
			return pauseSleep(ctx, 5*time.Millisecond)
		}
		return nil
	})
	require.Eventually(t, func() bool {
		return f.count(`topic IN ($1, $2, $3) AND status = 'COMPLETED'`, rated, keyed, sequenced) == len(reqs)
	}, 90*time.Second, 20*time.Millisecond, "every job of the limited topics completed")

	rates, err := claimwitness.RateStarts(ctx, f.pool)
	require.NoError(t, err)
	atRate := 0
	for _, r := range rates {
		require.Empty(t, r.Violation())
		if r.WindowMax == int64(r.RateLimit) {
			atRate++
		}
	}
	require.Len(t, rates, 48, "every start of the rated topic was judged")
	require.Positive(t, atRate, "some tenant's window held exactly its limit")

	keys, err := claimwitness.KeyStarts(ctx, f.pool)
	require.NoError(t, err)
	atCap := 0
	for _, k := range keys {
		require.Empty(t, k.Violation())
		if k.Topic == keyed && k.KeyRunning == 2 {
			atCap++
		}
	}
	require.Len(t, keys, 36+20, "every start of the keyed and sequenced topics was judged")
	require.Positive(t, atCap, "some key ran at its cap")
	require.Zero(t, f.count(`topic = $1 AND EXISTS (SELECT 1 FROM jobs AS n
        WHERE n.topic = jobs.topic AND n.sequence_key = jobs.sequence_key AND n.sequence_pos > jobs.sequence_pos
          AND n.started_at < jobs.finished_at)`, sequenced), "a later job of a sequence started before an earlier one finished")

	served := 0
	for _, url := range f.gatewayAdmins() {
		n := 0.0
		for _, topic := range []string{rated, keyed, sequenced} {
			n += f.scrape(url, fmt.Sprintf(`pulse_jobs_dispatched_total{topic=%q}`, topic))
		}
		if n > 0 {
			served++
		}
	}
	require.Equal(t, 2, served, "both gateways claimed the limited topics")
	t.Logf("%d rate-limited starts (%d at the limit), %d keyed and sequenced starts (%d at the cap), none over, on %d gateways",
		len(rates), atRate, len(keys), atCap, served)
}
