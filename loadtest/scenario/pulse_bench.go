package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// PulseSubmitBatch is the most jobs one SubmitJobs call carries here:
// control-api's default batch bound (PULSE_MAX_BATCH_JOBS). An insert of
// River's BenchInsertBatch goes out as that many calls at once.
const PulseSubmitBatch = 1000

// PulseBenchParams shape the pulse side: SDK workers × handler slots,
// streaming from every gateway of the Target.
type PulseBenchParams struct {
	Workers, Concurrency int
}

// pulseBench is pulse under the River CLI's workloads, through both gRPC
// hops: jobs go in through control-api's SubmitJobs and out through the
// gateways' streams to SDK workers in this process.
type pulseBench struct {
	t      Target
	p      PulseBenchParams
	client *pulse.Client
	pool   *pgxpool.Pool
	reqs   []pulse.JobRequest
}

func (b *pulseBench) insert(ctx context.Context, n int) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for lo := 0; lo < n; lo += PulseSubmitBatch {
		hi := min(lo+PulseSubmitBatch, n)
		wg.Go(func() {
			if _, err := b.client.EnqueueMany(ctx, b.reqs[lo:hi]); err != nil {
				mu.Lock()
				first = errors.Join(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

func (b *pulseBench) start(ctx context.Context, done func()) (func(), error) {
	return b.startWorkers(ctx, func(*pulse.Job) { done() })
}

// startWorkers runs the side's SDK workers on its topic, handle called as
// each handler starts; stop stops them and waits.
func (b *pulseBench) startWorkers(ctx context.Context, handle func(*pulse.Job)) (stop func(), err error) {
	workCtx, cancel := context.WithCancel(ctx)
	wg, err := startPulseWorkers(workCtx, b.t, []string{b.reqs[0].Topic}, b.p.Workers, b.p.Concurrency, handle)
	if err != nil {
		cancel()
		wg.Wait()
		return nil, err
	}
	return func() { cancel(); wg.Wait() }, nil
}

func (b *pulseBench) completed(ctx context.Context) (int64, error) {
	return countCompleted(ctx, b.pool)
}

// pulseSides is what every pulse side of a run shares — a pool on the
// fleet's database and a control-api client — and makes sides, each on a
// topic of its own.
type pulseSides struct {
	t      Target
	p      PulseBenchParams
	pool   *pgxpool.Pool
	client *pulse.Client
}

func openPulseSides(ctx context.Context, t Target, p PulseBenchParams) (*pulseSides, error) {
	pool, err := pgxpool.New(ctx, t.DatabaseURL)
	if err != nil {
		return nil, err
	}
	client, err := pulse.NewClient(t.ControlGRPC)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &pulseSides{t: t, p: p, pool: pool, client: client}, nil
}

func (s *pulseSides) close() {
	_ = s.client.Close() // a load client's close changes no result
	s.pool.Close()
}

// side is a pulse side on a new topic named after name.
func (s *pulseSides) side(name string) *pulseBench {
	topic := fmt.Sprintf("load.%s.%d", name, time.Now().UnixNano())
	reqs := make([]pulse.JobRequest, BenchInsertBatch)
	for i := range reqs {
		reqs[i] = pulse.JobRequest{Topic: topic, Args: []byte(`{}`)}
	}
	return &pulseBench{t: s.t, p: s.p, client: s.client, pool: s.pool, reqs: reqs}
}

// PulseBench runs one River CLI workload through pulse. Call ResetJobs
// before.
func PulseBench(ctx context.Context, t Target, p PulseBenchParams, w BenchWorkload, before func() error) (Result, error) {
	sides, err := openPulseSides(ctx, t, p)
	if err != nil {
		return Result{}, err
	}
	defer sides.close()
	run, err := runBench(ctx, sides.side("bench"), w, before)
	if err != nil {
		return Result{}, fmt.Errorf("pulse: %w", err)
	}
	return benchResult("pulse-"+w.Mode, w, run, map[string]any{
		"workers": p.Workers, "concurrency": p.Concurrency, "gateways": len(t.GatewayAddrs),
	}), nil
}
