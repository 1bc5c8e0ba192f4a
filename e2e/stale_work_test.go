package e2e_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
)

// logAbandoned is the SDK's line for an attempt it refused to start.
const logAbandoned = "abandoned an attempt whose lease expired before its handler started; this worker was stalled (stopped, frozen, or starved) for longer than the lease"

// TestAStalledWorkerNeverStartsExpiredWork freezes a real worker process
// (SIGSTOP) with free slots, then submits jobs: the gateway claims them
// for the frozen worker's free slots — and no more than those — and sends
// them into a socket nobody reads. Their leases lapse, the reaper retries
// them and a second worker completes them. When the frozen worker wakes
// (SIGCONT) and reads the assignments, it must not start any of them: it
// asks the gateway, learns the leases are gone, and abandons them.
func TestAStalledWorkerNeverStartsExpiredWork(t *testing.T) {
	t.Parallel()
	f := upChaosFleet(t, localfleet.Options{Gateways: 1, Reaper: true}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, claimwitness.Install(ctx, pool))
	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	const topic = "stale.work"
	const slots = 3

	frozen := startWorker(t, f, workerSpec{ID: "stale-frozen", Topic: topic, Gateways: f.GatewayAddrs, Concurrency: slots})
	// The worker is connected with its slots registered once a first job
	// ran on it.
	first, err := client.Enqueue(ctx, topic, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := frozen.event(t, "end", first.ID, 1); return ok },
		recoveryTimeout, 20*time.Millisecond, "the worker never ran a first job")
	require.Eventually(t, func() bool { return mustReadJob(t, ctx, pool, first.ID).Status == "COMPLETED" },
		recoveryTimeout, 20*time.Millisecond)
	// The slot comes back to the gateway once the report settled: freeze
	// only when the gateway counts every slot free again.
	admin := f.AdminURLs["dispatch-gateway-1"]
	require.Eventually(t, func() bool { return mustScrapeSum(t, ctx, admin, "pulse_gateway_free_slots", "") == slots },
		recoveryTimeout, 20*time.Millisecond, "the gateway never had the worker's slots back")

	require.NoError(t, frozen.Signal(syscall.SIGSTOP))
	stoppedAt := time.Now()
	const n = 5
	ids := make([]string, n)
	for i := range ids {
		sub, err := client.Enqueue(ctx, topic, map[string]int{"i": i})
		require.NoError(t, err)
		ids[i] = sub.ID
	}
	// The gateway feeds the frozen worker only what its credits allow.
	require.Eventually(t, func() bool {
		return countWhere(t, ctx, pool, `topic = $1 AND locked_by = $2 AND status = 'RUNNING'`, topic, frozen.ID) == slots
	},
		recoveryTimeout, 20*time.Millisecond, "the gateway never claimed for the frozen worker's free slots")
	require.Never(t, func() bool {
		return countWhere(t, ctx, pool, `topic = $1 AND locked_by = $2 AND status = 'RUNNING'`, topic, frozen.ID) > slots
	},
		time.Second, 50*time.Millisecond, "the gateway claimed more than the frozen worker's free slots")
	require.EqualValues(t, n-slots, countWhere(t, ctx, pool, `topic = $1 AND status = 'PENDING'`, topic))

	// Another worker finishes everything, the frozen worker's attempts
	// once the reaper has retried them.
	rescuer := startWorker(t, f, workerSpec{ID: "stale-rescuer", Topic: topic, Gateways: f.GatewayAddrs, Concurrency: 4})
	require.Eventually(t, func() bool { return countWhere(t, ctx, pool, `topic = $1 AND status = 'COMPLETED'`, topic) == n+1 },
		recoveryTimeout, 50*time.Millisecond, "the rescuer never completed every job")

	require.NoError(t, frozen.Signal(syscall.SIGCONT))
	// The stale assignments were read and abandoned, not run.
	var staleAttempts []claimwitness.Claim
	claims, err := claimwitness.Claims(ctx, pool)
	require.NoError(t, err)
	for _, c := range claims {
		if c.LockedBy == frozen.ID && c.Committed.After(stoppedAt) {
			staleAttempts = append(staleAttempts, c)
		}
	}
	require.Len(t, staleAttempts, slots, "claims for the frozen worker: %+v", staleAttempts)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, s := range staleAttempts {
			_, logged := frozen.logged(logAbandoned, s.JobID, s.Attempt)
			assert.True(c, logged, "job %s attempt %d was not abandoned", s.JobID, s.Attempt)
		}
	}, recoveryTimeout, 50*time.Millisecond)
	for _, s := range staleAttempts {
		_, started := frozen.event(t, "start", s.JobID, s.Attempt)
		require.False(t, started, "the frozen worker started job %s attempt %d after its lease expired", s.JobID, s.Attempt)
		_, ran := rescuer.event(t, "end", s.JobID, s.Attempt+1)
		require.True(t, ran, "job %s was finished by the rescuer", s.JobID)
	}
	// Woken, the worker is healthy: it takes new work.
	next, err := client.Enqueue(ctx, topic, nil, pulse.Priority(9))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return mustReadJob(t, ctx, pool, next.ID).Status == "COMPLETED" },
		recoveryTimeout, 20*time.Millisecond)
}

func countWhere(t *testing.T, ctx context.Context, pool *pgxpool.Pool, where string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE `+where, args...).Scan(&n))
	return n
}
