package scenario

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// Target is a running fleet to load.
type Target struct {
	ControlHTTP  string
	ControlGRPC  string
	GatewayAddrs []string
	DatabaseURL  string
	// PIDs are the fleet's processes by name (localfleet's Fleet.PIDs:
	// control-api, dispatch-gateway-N, reaper, and the Postgres postmaster
	// as "postgres"), for the CPU each run costs them.
	PIDs map[string]int
	// WALDataDir is the cluster's data directory when runs should break
	// their WAL down by record type (pulse-load -wal-stats), else empty.
	WALDataDir string
}

// ThroughputParams shape the throughput run.
type ThroughputParams struct {
	Jobs        int
	Producers   int
	Batch       int // jobs per SubmitJobs call
	Workers     int
	Concurrency int // per worker
}

// Throughput submits Jobs from Producers concurrently with Workers running
// no-op handlers, and measures submit→complete throughput (first submit to
// last completion committed) and submit→start latency under load.
func Throughput(ctx context.Context, t Target, p ThroughputParams) (Result, error) {
	pool, err := pgxpool.New(ctx, t.DatabaseURL)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	baseline, err := countCompleted(ctx, pool)
	if err != nil {
		return Result{}, err
	}

	topic := fmt.Sprintf("load.throughput.%d", time.Now().UnixNano())
	var started atomic.Int64
	waits := make([]time.Duration, p.Jobs)
	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	wg, err := startPulseWorkers(workCtx, t, []string{topic}, p.Workers, p.Concurrency, func(job *pulse.Job) {
		n := started.Add(1)
		if int(n) <= len(waits) {
			waits[n-1] = time.Since(job.SubmittedAt)
		}
	})
	if err != nil {
		return Result{}, err
	}
	defer wg.Wait()
	defer stop()

	client, err := pulse.NewClient(t.ControlGRPC)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()

	begin := time.Now()
	submitErr := submitPulse(ctx, client, topic, p.Jobs, p.Producers, p.Batch)
	submitDone := time.Since(begin)
	if submitErr != nil {
		return Result{}, fmt.Errorf("submit: %w", submitErr)
	}

	if err := waitPulseCompleted(ctx, pool, &started, p.Jobs, baseline); err != nil {
		return Result{}, err
	}
	elapsed := time.Since(begin)
	p50, p95, p99, pmax := Percentiles(waits[:min(int(started.Load()), len(waits))])
	return Result{
		Scenario: "throughput",
		Params: map[string]any{"jobs": p.Jobs, "producers": p.Producers, "batch": p.Batch,
			"workers": p.Workers, "concurrency": p.Concurrency, "gateways": len(t.GatewayAddrs)},
		Metrics: map[string]float64{
			"jobs_per_s":   float64(p.Jobs) / elapsed.Seconds(),
			"submit_per_s": float64(p.Jobs) / submitDone.Seconds(),
			"elapsed_s":    elapsed.Seconds(),
			"wait_p50_ms":  p50,
			"wait_p95_ms":  p95,
			"wait_p99_ms":  p99,
			"wait_max_ms":  pmax,
		},
	}, nil
}

func rotate(addrs []string, i int) []string {
	out := make([]string, len(addrs))
	for j := range addrs {
		out[j] = addrs[(i+j)%len(addrs)]
	}
	return out
}

// startPulseWorkers runs n SDK workers with conc slots each on topics,
// each starting at a different gateway, until ctx ends; handle is called
// from each handler, which then succeeds. Wait on the returned group after
// canceling ctx.
func startPulseWorkers(ctx context.Context, t Target, topics []string, n, conc int, handle func(*pulse.Job)) (*sync.WaitGroup, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	for i := range n {
		w, err := pulse.NewWorker(rotate(t.GatewayAddrs, i), pulse.WithConcurrency(conc), pulse.WithLogger(quiet),
			pulse.WithWorkerID(fmt.Sprintf("load-%d", i)))
		if err != nil {
			return &wg, err
		}
		for _, topic := range topics {
			w.Register(topic, func(ctx context.Context, job *pulse.Job) error {
				handle(job)
				return nil
			})
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
	}
	return &wg, nil
}

// submitPulse sends the given number of jobs of topic through control-api's SubmitJobs
// from producers goroutines in calls of batch, and returns the first error.
func submitPulse(ctx context.Context, client *pulse.Client, topic string, jobs, producers, batch int) error {
	args := []byte(`{}`)
	return produce(jobs, producers, batch, func(k int) error {
		reqs := make([]pulse.JobRequest, k)
		for j := range reqs {
			reqs[j] = pulse.JobRequest{Topic: topic, Args: args}
		}
		_, err := client.EnqueueMany(ctx, reqs)
		return err
	})
}

// waitPulseCompleted returns once the database shows jobs more COMPLETED
// jobs than baseline. Completion is what is committed, not what handlers
// saw: it waits for the handlers first (free), then confirms in the
// database (a scan, so rarely).
func waitPulseCompleted(ctx context.Context, pool *pgxpool.Pool, started *atomic.Int64, jobs int, baseline int64) error {
	for started.Load() < int64(jobs) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	for {
		completed, err := countCompleted(ctx, pool)
		if err != nil {
			return err
		}
		if completed-baseline >= int64(jobs) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("only %d of %d jobs completed: %w", completed-baseline, jobs, ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countCompleted is how many COMPLETED jobs the database holds.
func countCompleted(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'COMPLETED'`).Scan(&n)
	return n, err
}
