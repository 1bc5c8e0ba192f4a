package scenario

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

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
	// The Enqueue call (to control-api, the INSERT and its commit) on its
	// own; the handler may start before the call has returned.
	submit := make([]time.Duration, 0, p.Samples)
	sent := make(map[string][2]time.Time, p.Samples) // job id: Enqueue called, handler started
	for range p.Samples {
		time.Sleep(p.Gap)
		t0 := time.Now()
		job, err := client.Enqueue(ctx, topic, nil)
		if err != nil {
			return Result{}, err
		}
		submit = append(submit, time.Since(t0))
		select {
		case t1 := <-startedCh:
			lat = append(lat, t1.Sub(t0))
			sent[job.ID] = [2]time.Time{t0, t1}
		case <-time.After(10 * time.Second):
			return Result{}, errors.New("a job did not start within 10s")
		}
	}
	p50, p95, p99, pmax := Percentiles(lat)
	s50, _, s99, _ := Percentiles(submit)
	metrics := map[string]float64{"p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "max_ms": pmax,
		"enqueue_p50_ms": s50, "enqueue_p99_ms": s99}
	hops, err := latencyHops(ctx, t, sent)
	if err != nil {
		return Result{}, err
	}
	maps.Copy(metrics, hops)
	floors, err := latencyFloors(ctx, t, p)
	if err != nil {
		return Result{}, err
	}
	maps.Copy(metrics, floors)
	return Result{
		Scenario: "idle-latency",
		Params:   map[string]any{"samples": p.Samples, "gap": p.Gap.String(), "workers": p.Workers, "gateways": len(t.GatewayAddrs)},
		Metrics:  metrics,
	}, nil
}

// latencyHops splits each sample at the two clock readings Postgres
// recorded in the job's row, on the machine's one wall clock: submitted_at
// is the INSERT's transaction start, started_at the claim statement's
// (statement_timestamp(), as long as the claim started after the insert;
// in the claim's one round trip its transaction starts a few µs before).
// So the sample is
//
//   - to_insert: from the Enqueue call to the INSERT's start (the SDK,
//     gRPC to control-api, its handler and coalescer, the statement's
//     send);
//   - insert_to_claim: the INSERT, its commit, the NOTIFY reaching a
//     gateway, and the gateway's claim starting;
//   - claim_to_handler: the claim statement and its commit, the job's
//     trip over the worker's stream, and the SDK starting the handler.
//
// The wall clock can step; medians of 300 samples shrug off one step.
func latencyHops(ctx context.Context, t Target, sent map[string][2]time.Time) (map[string]float64, error) {
	db, err := pgx.Connect(ctx, t.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer db.Close(ctx)
	ids := make([]string, 0, len(sent))
	for id := range sent {
		ids = append(ids, id)
	}
	rows, err := db.Query(ctx, `SELECT id::text, submitted_at, started_at FROM jobs WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, err
	}
	var toInsert, insertToClaim, claimToHandler []time.Duration
	for rows.Next() {
		var id string
		var submitted, started time.Time
		if err := rows.Scan(&id, &submitted, &started); err != nil {
			return nil, err
		}
		at := sent[id]
		toInsert = append(toInsert, submitted.Sub(at[0]))
		insertToClaim = append(insertToClaim, started.Sub(submitted))
		claimToHandler = append(claimToHandler, at[1].Sub(started))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(toInsert) != len(sent) {
		return nil, fmt.Errorf("latency hops: %d of %d sampled jobs found", len(toInsert), len(sent))
	}
	out := map[string]float64{}
	for name, ds := range map[string][]time.Duration{
		"hop_to_insert": toInsert, "hop_insert_to_claim": insertToClaim, "hop_claim_to_handler": claimToHandler,
	} {
		// The p99 says which hop the slow samples were slow in.
		out[name+"_p50_ms"], _, out[name+"_p99_ms"], _ = Percentiles(ds)
	}
	return out, nil
}

// latencyFloors measures, with the same gaps between samples, what the
// path's parts cost on their own on this machine: a gRPC round trip to
// control-api that touches no database (the health check), a round trip
// to Postgres (SELECT 1), and a one-row INSERT with its durable commit
// into a table without triggers or indexes. The Enqueue call is at least
// the first plus the last; the gap between them is control-api's and the
// SDK's own time and the jobs table's.
func latencyFloors(ctx context.Context, t Target, p LatencyParams) (map[string]float64, error) {
	conn, err := grpc.NewClient(t.ControlGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	db, err := pgx.Connect(ctx, t.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer db.Close(ctx)
	// A plain table, not a temporary one: a transaction that wrote only
	// temporary tables writes no WAL and so does not wait for a flush at
	// commit, which is the cost this floor is for.
	if _, err := db.Exec(ctx, `CREATE TABLE pulse_latency_floor (id bigint, at timestamptz)`); err != nil {
		return nil, err
	}
	defer db.Exec(context.WithoutCancel(ctx), `DROP TABLE pulse_latency_floor`) //nolint:errcheck // a throwaway fleet's database

	samples := min(p.Samples, 200)
	probes := []struct {
		name string
		run  func() error
	}{
		{"grpc_rtt", func() error { _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); return err }},
		{"db_rtt", func() error { _, err := db.Exec(ctx, `SELECT 1`); return err }},
		{"db_insert_commit", func() error {
			_, err := db.Exec(ctx, `INSERT INTO pulse_latency_floor VALUES (1, now())`)
			return err
		}},
	}
	out := map[string]float64{}
	for _, pr := range probes {
		if err := pr.run(); err != nil { // warm the connection and the statement
			return nil, fmt.Errorf("%s: %w", pr.name, err)
		}
		took := make([]time.Duration, 0, samples)
		for range samples {
			time.Sleep(p.Gap)
			t0 := time.Now()
			if err := pr.run(); err != nil {
				return nil, fmt.Errorf("%s: %w", pr.name, err)
			}
			took = append(took, time.Since(t0))
		}
		// The p99 is the host's own tail at this pace: a sample's path
		// crosses two durable commits and several process wake-ups, so its
		// p99 is no better than theirs.
		out[pr.name+"_p50_ms"], _, out[pr.name+"_p99_ms"], _ = Percentiles(took)
	}
	return out, nil
}

// LoadedLatency is IdleLatency while the fleet also runs a steady load at
// share of its maximum: it measures the maximum first (the river
// scenario's concurrent workload, 20 s, load's workers), works that run's
// queue off and empties the table, then runs the load (load's workers,
// inserts paced as the soak's) on a topic of its own while the samples
// go through as in IdleLatency. A fixedRate above 0 is the load's rate
// instead, and the maximum is not measured: two runs that compare a
// setting then load the fleet alike, where half of each run's own
// maximum would differ by the host's swing.
func LoadedLatency(ctx context.Context, t Target, p LatencyParams, load PulseBenchParams, share, fixedRate float64) (Result, error) {
	sides, err := openPulseSides(ctx, t, load)
	if err != nil {
		return Result{}, err
	}
	defer sides.close()
	rate, maximum := fixedRate, 0.0
	if rate <= 0 {
		probe := sides.side("probe")
		run, err := runBench(ctx, probe, BenchWorkload{Mode: WorkloadConcurrent, Duration: latencyProbe}, nil)
		if err != nil {
			return Result{}, fmt.Errorf("probe the maximum: %w", err)
		}
		if err := workOff(ctx, probe, run.inserted); err != nil {
			return Result{}, fmt.Errorf("after the probe: %w", err)
		}
		if err := ResetJobs(ctx, t.DatabaseURL); err != nil {
			return Result{}, err
		}
		maximum = run.rate()
		rate = share * maximum
	}

	bg := sides.side("background")
	stopWorkers, err := bg.start(ctx, func() {})
	if err != nil {
		return Result{}, err
	}
	defer stopWorkers()
	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadErr error
	var lwg sync.WaitGroup
	lwg.Go(func() { loadErr = producePaced(loadCtx, bg, rate) })
	r, err := IdleLatency(ctx, t, p)
	stopLoad()
	lwg.Wait()
	if err != nil {
		return Result{}, err
	}
	if loadErr != nil {
		return Result{}, fmt.Errorf("background load: %w", loadErr)
	}
	r.Scenario = "loaded-latency"
	r.Params["background_rate"] = int(rate)
	r.Params["maximum"] = int(maximum) // 0: not measured (a fixed rate)
	r.Params["share"] = share
	return r, nil
}
