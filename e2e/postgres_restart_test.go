package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
)

// TestRecoveryFromPostgresRestart restarts Postgres (pg_ctl restart -m
// fast, which cuts every connection) while producers submit over gRPC and
// workers run jobs. Every service must become ready again by itself, with
// no process restarted, and every job a submit returned must end
// COMPLETED: none lost.
func TestRecoveryFromPostgresRestart(t *testing.T) {
	t.Parallel()
	f := upChaosFleet(t, localfleet.Options{Gateways: 2, Reaper: true}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NotNil(t, f.Cluster, "the test restarts the fleet's own Postgres")

	const topic = "recovery.pg-restart"
	a, b := f.GatewayAddrs[0], f.GatewayAddrs[1]
	workers := []*workerProcess{
		startWorker(t, f, workerSpec{ID: "restart-w1", Topic: topic, Gateways: []string{a, b}, Concurrency: 8, Work: 2 * time.Millisecond}),
		startWorker(t, f, workerSpec{ID: "restart-w2", Topic: topic, Gateways: []string{b, a}, Concurrency: 8, Work: 2 * time.Millisecond}),
	}
	pidsBefore := withoutPostgres(f.PIDs())

	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	defer client.Close()

	// Producers submit until told to stop. A submit that fails because the
	// database is away (Unavailable, or our own deadline) is retried with
	// the same idempotency key, as a careful producer would; any other
	// error fails the test.
	const producers = 4
	var (
		mu        sync.Mutex
		ids       = map[string]bool{}
		submitted atomic.Int64
		retries   outageRetries
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	for p := range producers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("restart-%d-%d", p, i)
				id, err := submitRetrying(ctx, client, topic, key, &retries)
				if err != nil {
					t.Errorf("producer %d: %v", p, err)
					return
				}
				mu.Lock()
				ids[id] = true
				mu.Unlock()
				submitted.Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	waitSubmitted := func(n int64) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.GreaterOrEqual(c, submitted.Load(), n, "submits")
		}, recoveryTimeout, 5*time.Millisecond, "producers stalled")
	}

	// Load before, during and after the restart.
	waitSubmitted(150)
	require.NoError(t, f.Cluster.Restart(ctx))
	restartedAt := submitted.Load()
	waitSubmitted(restartedAt + 150)
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow() // a producer hit an error that was not an outage
	}
	t.Logf("submitted %d jobs; submits retried after Unavailable: %d, after DeadlineExceeded: %d",
		submitted.Load(), retries.unavailable.Load(), retries.deadline.Load())

	// Every service answers /readyz again, and none was restarted.
	for name, url := range f.AdminURLs {
		require.Eventually(t, func() bool { return httpStatus(ctx, url+"/readyz") == http.StatusOK },
			recoveryTimeout, 50*time.Millisecond, "%s never became ready again", name)
	}
	for _, p := range f.Processes {
		require.False(t, p.Exited(), "%s exited:\n%s", p.Name, lastLines(p.Logs(), 30))
	}
	for _, w := range workers {
		require.False(t, w.Exited(), "worker %s exited", w.ID)
	}
	require.Equal(t, pidsBefore, withoutPostgres(f.PIDs()), "a service process was replaced")

	// Nothing lost: every id a submit returned ends COMPLETED.
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()
	want := make([]string, 0, len(ids))
	for id := range ids {
		want = append(want, id)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var present, completed int
		require.NoError(c, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'COMPLETED') FROM jobs WHERE id = ANY($1::uuid[])`, want).
			Scan(&present, &completed))
		assert.Equal(c, len(want), present, "submitted jobs in the table")
		assert.Equal(c, len(want), completed, "submitted jobs COMPLETED")
	}, recoveryTimeout, 100*time.Millisecond, "submitted jobs were lost")

	var total, unfinished int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status <> 'COMPLETED') FROM jobs WHERE topic = $1`, topic).
		Scan(&total, &unfinished))
	t.Logf("%d jobs in the table for %d returned ids (a retried submit whose first try had committed and finished enqueues again)", total, len(want))
	require.Zero(t, unfinished, "every job in the table finished")
}

// outageRetries counts submits retried, by the code that said "try again".
type outageRetries struct{ unavailable, deadline atomic.Int64 }

// submitRetrying enqueues one job, retrying while the database is away.
func submitRetrying(ctx context.Context, client *pulse.Client, topic, key string, retries *outageRetries) (string, error) {
	for {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := client.Enqueue(callCtx, topic, map[string]any{"key": key}, pulse.IdempotencyKey(key))
		cancel()
		if err == nil {
			return s.ID, nil
		}
		code := status.Code(err)
		if ctx.Err() != nil || (code != codes.Unavailable && code != codes.DeadlineExceeded) {
			return "", fmt.Errorf("submit %s: %w (code %s)", key, err, code)
		}
		if code == codes.Unavailable {
			retries.unavailable.Add(1)
		} else {
			retries.deadline.Add(1)
		}
		select {
		case <-ctx.Done():
			return "", errors.Join(err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func httpStatus(ctx context.Context, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func withoutPostgres(pids map[string]int) map[string]int {
	delete(pids, "postgres")
	return pids
}
