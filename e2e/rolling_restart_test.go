package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
)

// rollShutdownTimeout is the gateways' PULSE_SHUTDOWN_TIMEOUT in the
// rolling-restart test: each must exit 0 within it after SIGTERM.
const rollShutdownTimeout = 10 * time.Second

// TestRollingRestartOfGatewaysLosesNoJob rolls every dispatch-gateway, as a
// Kubernetes rolling update or `docker compose restart` would, while
// producers submit and SDK workers (given both gateway addresses) run
// jobs: each gateway in turn gets SIGTERM, must exit 0 within its shutdown
// timeout, and is started again on the same address. Jobs must keep
// completing while a gateway is down (the workers moved to the other
// replica) and after it is back. In the end every submitted job is
// COMPLETED, and no job ever ran on two workers at the same time.
func TestRollingRestartOfGatewaysLosesNoJob(t *testing.T) {
	t.Parallel()
	f := upChaosFleet(t, localfleet.Options{Gateways: 2, Reaper: true},
		map[string]string{"PULSE_SHUTDOWN_TIMEOUT": rollShutdownTimeout.String()})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()

	const topic = "rolling.restart"
	rec := &recorder{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Four workers, each with both gateways, half of them on each first.
	workCtx, stopWorkers := context.WithCancel(ctx)
	var workers sync.WaitGroup
	for i := range 4 {
		id := fmt.Sprintf("roll-w%d", i)
		targets := []string{f.GatewayAddrs[i%2], f.GatewayAddrs[(i+1)%2]}
		w, err := pulse.NewWorker(targets, pulse.WithWorkerID(id), pulse.WithConcurrency(8),
			pulse.WithLogger(logger), pulse.WithShutdownTimeout(5*time.Second))
		require.NoError(t, err)
		w.Register(topic, func(ctx context.Context, job *pulse.Job) error {
			start := time.Now()
			time.Sleep(time.Duration(2+job.ID[len(job.ID)-1]%8) * time.Millisecond)
			rec.add(execution{job: job.ID, worker: id, attempt: job.Attempt, start: start, end: time.Now()})
			return nil
		})
		workers.Go(func() {
			if err := w.Run(workCtx); err != nil {
				t.Errorf("worker %s: %v", id, err)
			}
		})
	}

	// Producers submit over gRPC until the roll is over; control-api is not
	// restarted, so every submit must succeed.
	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	defer client.Close()
	var (
		mu        sync.Mutex
		ids       = map[string]bool{}
		stop      = make(chan struct{})
		producers sync.WaitGroup
	)
	for p := range 4 {
		producers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(3 * time.Millisecond):
				}
				s, err := client.Enqueue(ctx, topic, map[string]any{"producer": p, "i": i})
				if err != nil {
					t.Errorf("producer %d: %v", p, err)
					return
				}
				mu.Lock()
				ids[s.ID] = true
				mu.Unlock()
			}
		})
	}

	// completed counts COMPLETED jobs; -1 when the query fails, so it is
	// safe inside require.Eventually's condition goroutine.
	completed := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'COMPLETED'`).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	// progress waits until more jobs have completed than before: work
	// flows through whatever gateways are up.
	progress := func(what string) {
		t.Helper()
		before := completed()
		require.GreaterOrEqual(t, before, 0, "count COMPLETED jobs")
		require.Eventually(t, func() bool { return completed() >= before+50 }, recoveryTimeout, 20*time.Millisecond,
			"jobs stopped completing %s", what)
	}
	progress("before the roll")

	for i := range f.GatewayAddrs {
		name := fmt.Sprintf("%s-%d", localfleet.DispatchGateway, i+1)
		gw := fleetProcess(t, f, name)
		// Under load: jobs are on workers when the signal lands.
		require.Eventually(t, func() bool {
			var running int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'RUNNING'`).Scan(&running)
			return err == nil && running > 0
		}, recoveryTimeout, time.Millisecond, "jobs running before %s is stopped", name)
		sigterm := time.Now()
		require.NoError(t, gw.Signal(syscall.SIGTERM))
		require.NoError(t, gw.Wait(rollShutdownTimeout), "%s must exit 0 within its shutdown timeout after SIGTERM\n%s", name, lastLines(gw.Logs(), 30))
		t.Logf("%s exited 0 %s after SIGTERM", name, time.Since(sigterm).Round(time.Millisecond))

		progress("while " + name + " is down")
		restartCtx, cancelRestart := context.WithTimeout(ctx, recoveryTimeout)
		_, err := f.Restart(restartCtx, name)
		cancelRestart()
		require.NoError(t, err, "restart %s", name)
		progress("after " + name + " restarted")
	}

	close(stop)
	producers.Wait()
	mu.Lock()
	submitted := len(ids)
	mu.Unlock()
	require.Eventually(t, func() bool { return completed() == submitted }, recoveryTimeout, 50*time.Millisecond,
		"every submitted job must complete")
	stopWorkers()
	workers.Wait()

	// The table holds exactly the submitted jobs, all COMPLETED.
	var total, done int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'COMPLETED') FROM jobs`).Scan(&total, &done))
	require.Equal(t, submitted, total)
	require.Equal(t, submitted, done)

	// Every job ran, and no two runs of one job overlapped. A job may run
	// more than once (delivery is at-least-once: a result a stopping gateway
	// could not record is recovered by the reaper), but never concurrently.
	byJob := map[string][]execution{}
	for _, e := range rec.runs {
		byJob[e.job] = append(byJob[e.job], e)
	}
	reran := 0
	for id := range ids {
		runs := byJob[id]
		require.NotEmpty(t, runs, "job %s is COMPLETED but no handler ran it", id)
		if len(runs) > 1 {
			reran++
		}
		for a := range runs {
			for b := a + 1; b < len(runs); b++ {
				overlap := runs[a].start.Before(runs[b].end) && runs[b].start.Before(runs[a].end)
				require.False(t, overlap, "job %s ran on %s (attempt %d) and %s (attempt %d) at the same time",
					id, runs[a].worker, runs[a].attempt, runs[b].worker, runs[b].attempt)
			}
		}
	}
	t.Logf("%d jobs through a rolling restart of %d gateways; %d ran more than once", submitted, len(f.GatewayAddrs), reran)
}
