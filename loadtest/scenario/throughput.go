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
	var baseline int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'COMPLETED'`).Scan(&baseline); err != nil {
		return Result{}, err
	}

	topic := fmt.Sprintf("load.throughput.%d", time.Now().UnixNano())
	var started atomic.Int64
	waits := make([]time.Duration, p.Jobs)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for i := range p.Workers {
		targets := rotate(t.GatewayAddrs, i)
		w, err := pulse.NewWorker(targets, pulse.WithConcurrency(p.Concurrency), pulse.WithLogger(quiet),
			pulse.WithWorkerID(fmt.Sprintf("load-%d", i)))
		if err != nil {
			return Result{}, err
		}
		w.Register(topic, func(ctx context.Context, job *pulse.Job) error {
			n := started.Add(1)
			if int(n) <= len(waits) {
				waits[n-1] = time.Since(job.SubmittedAt)
			}
			return nil
		})
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(workCtx) }()
	}
	defer wg.Wait()
	defer stop()

	client, err := pulse.NewClient(t.ControlGRPC)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()

	begin := time.Now()
	var submitErr atomic.Value
	var pwg sync.WaitGroup
	per := p.Jobs / p.Producers
	for i := range p.Producers {
		n := per
		if i == p.Producers-1 {
			n = p.Jobs - per*(p.Producers-1)
		}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			args := []byte(`{}`)
			for sent := 0; sent < n; {
				k := min(p.Batch, n-sent)
				reqs := make([]pulse.JobRequest, k)
				for j := range reqs {
					reqs[j] = pulse.JobRequest{Topic: topic, Args: args}
				}
				if _, err := client.EnqueueMany(ctx, reqs); err != nil {
					submitErr.Store(err)
					return
				}
				sent += k
			}
		}()
	}
	pwg.Wait()
	submitDone := time.Since(begin)
	if err, _ := submitErr.Load().(error); err != nil {
		return Result{}, fmt.Errorf("submit: %w", err)
	}

	// Completion is what is committed, not what handlers saw: wait for the
	// handlers (free), then confirm in the database (a scan, so rarely).
	for started.Load() < int64(p.Jobs) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	var completed int64
	for {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'COMPLETED'`).Scan(&completed); err != nil {
			return Result{}, err
		}
		if completed-baseline >= int64(p.Jobs) {
			break
		}
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("only %d of %d jobs completed: %w", completed-baseline, p.Jobs, ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(begin)
	p50, p95, p99, max := Percentiles(waits[:min(int(started.Load()), len(waits))])
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
			"wait_max_ms":  max,
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
