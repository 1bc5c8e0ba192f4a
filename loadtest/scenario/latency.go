package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// LatencyParams shape the idle-latency run.
type LatencyParams struct {
	Samples int
	Gap     time.Duration // pause between submits, so the system is idle
	Workers int
}

// IdleLatency submits one job at a time into an idle fleet and measures,
// on one monotonic clock, from the start of the Enqueue call to the start
// of the handler.
func IdleLatency(ctx context.Context, t Target, p LatencyParams) (Result, error) {
	topic := fmt.Sprintf("load.latency.%d", time.Now().UnixNano())
	startedCh := make(chan time.Time, 1)
	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	wg, err := startPulseWorkers(workCtx, t, []string{topic}, p.Workers, 4, func(*pulse.Job) { startedCh <- time.Now() })
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

	// Warm up connections and the first claim.
	time.Sleep(time.Second)
	if _, err := client.Enqueue(ctx, topic, nil); err != nil {
		return Result{}, err
	}
	<-startedCh

	lat := make([]time.Duration, 0, p.Samples)
	// The two halves: the Enqueue call (to control-api, the INSERT and
	// its commit), and from its return to the handler's start (the
	// gateway's wake-up, claim and dispatch; the handler may start before
	// the call has returned, so it can be negative).
	submit := make([]time.Duration, 0, p.Samples)
	for range p.Samples {
		time.Sleep(p.Gap)
		t0 := time.Now()
		if _, err := client.Enqueue(ctx, topic, nil); err != nil {
			return Result{}, err
		}
		submit = append(submit, time.Since(t0))
		select {
		case t1 := <-startedCh:
			lat = append(lat, t1.Sub(t0))
		case <-time.After(10 * time.Second):
			return Result{}, errors.New("a job did not start within 10s")
		}
	}
	p50, p95, p99, pmax := Percentiles(lat)
	s50, _, s99, _ := Percentiles(submit)
	return Result{
		Scenario: "idle-latency",
		Params:   map[string]any{"samples": p.Samples, "gap": p.Gap.String(), "workers": p.Workers, "gateways": len(t.GatewayAddrs)},
		Metrics: map[string]float64{"p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "max_ms": pmax,
			"enqueue_p50_ms": s50, "enqueue_p99_ms": s99},
	}, nil
}
