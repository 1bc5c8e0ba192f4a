package scenario

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// PulseBacklog submits Jobs through control-api while no worker serves
// their topic (the same producers and batches as Throughput), then starts
// the workers and measures the work-off: workers starting to the database
// showing every job COMPLETED. It is the pulse side of the river
// scenario's backlog workload. before, when set, runs between the inserts
// and the work-off (BacklogReady: settle, checkpoint, start the meter).
func PulseBacklog(ctx context.Context, t Target, p ThroughputParams, before func() error) (Result, error) {
	pool, err := pgxpool.New(ctx, t.DatabaseURL)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	baseline, err := countCompleted(ctx, pool)
	if err != nil {
		return Result{}, err
	}
	topic := fmt.Sprintf("load.backlog.%d", time.Now().UnixNano())

	client, err := pulse.NewClient(t.ControlGRPC)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	t0 := time.Now()
	if err := submitPulse(ctx, client, topic, p.Jobs, p.Producers, p.Batch); err != nil {
		return Result{}, fmt.Errorf("submit backlog: %w", err)
	}
	insertTook := time.Since(t0)
	if before != nil {
		if err := before(); err != nil {
			return Result{}, err
		}
	}

	var started atomic.Int64
	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	begin := time.Now()
	wg, err := startPulseWorkers(workCtx, t, []string{topic}, p.Workers, p.Concurrency, func(*pulse.Job) { started.Add(1) })
	if err != nil {
		return Result{}, err
	}
	defer wg.Wait()
	defer stop()
	if err := waitPulseCompleted(ctx, pool, &started, p.Jobs, baseline); err != nil {
		return Result{}, err
	}
	elapsed := time.Since(begin)
	return Result{
		Scenario: "pulse-backlog",
		Params: map[string]any{"jobs": p.Jobs, "producers": p.Producers, "batch": p.Batch,
			"workers": p.Workers, "concurrency": p.Concurrency, "gateways": len(t.GatewayAddrs)},
		Metrics: map[string]float64{
			"jobs_per_s":   float64(p.Jobs) / elapsed.Seconds(),
			"elapsed_s":    elapsed.Seconds(),
			"insert_per_s": float64(p.Jobs) / insertTook.Seconds(),
		},
	}, nil
}
