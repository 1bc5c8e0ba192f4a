// Command pulse-load runs the load-test scenarios against a throwaway local
// fleet (real binaries, real Postgres) or an existing one, and prints each
// result as a JSON line on stdout and a readable line on stderr.
//
//	go run ./loadtest/cmd/pulse-load -scenario all
//	go run ./loadtest/cmd/pulse-load -scenario throughput -jobs 200000 -workers 4 -gateways 2
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/loadtest/scenario"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pulse-load:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		which       = flag.String("scenario", "all", "throughput, latency, idle, backlog, pause, or all (comma-separated)")
		gateways    = flag.Int("gateways", 2, "dispatch-gateway replicas in the local fleet")
		jobs        = flag.Int("jobs", 200000, "throughput: jobs to submit")
		producers   = flag.Int("producers", 4, "throughput: concurrent producers")
		batch       = flag.Int("batch", 500, "throughput: jobs per SubmitJobs call")
		workers     = flag.Int("workers", 4, "throughput: SDK worker processes (in this process)")
		concurrency = flag.Int("concurrency", 256, "throughput: handler slots per worker")
		samples     = flag.Int("samples", 300, "latency: jobs submitted one at a time")
		pauses      = flag.Int("pauses", 120, "pause: pause/resume rounds (random scope and mode), judged by commit order")
		idleWorkers = flag.Int("idle-workers", 1000, "idle: connected idle workers")
		backlog     = flag.Int("backlog", 1000000, "backlog: the large backlog size")
		fast        = flag.Bool("fast-pg", false, "run the throwaway Postgres with fsync and synchronous_commit off")
		cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of this process (producers and SDK workers) to the file")
		statements  = flag.Bool("pg-stat-statements", false, "load pg_stat_statements and print the top statements by total time at the end")
	)
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()

	env := map[string]string{"PULSE_LOG_LEVEL": "warn"}
	opts := localfleet.Options{Gateways: *gateways, Env: env, Logger: logger, Reaper: true}
	opts.DurablePostgres = !*fast
	opts.PostgresSettings = map[string]string{}
	if *statements {
		opts.PostgresSettings["shared_preload_libraries"] = "'pg_stat_statements'"
	}
	if strings.Contains(*which, "pause") || *which == "all" {
		// The pause scenario judges by commit time (claimwitness).
		opts.PostgresSettings["track_commit_timestamp"] = "on"
	}
	fleet, err := localfleet.Up(ctx, opts)
	if err != nil {
		return err
	}
	defer fleet.Down()
	target := scenario.Target{ControlHTTP: fleet.ControlHTTP, ControlGRPC: fleet.ControlGRPC, GatewayAddrs: fleet.GatewayAddrs, DatabaseURL: fleet.DatabaseURL}
	fmt.Fprintf(os.Stderr, "machine: %d CPUs, %s/%s, Go %s; Postgres on the same machine (fast=%v)\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), *fast)

	want := map[string]bool{}
	for _, s := range strings.Split(*which, ",") {
		want[strings.TrimSpace(s)] = true
	}
	all := want["all"]
	emit := func(r scenario.Result, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", r.Scenario, err)
		}
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		fmt.Fprintln(os.Stderr, r.Line())
		return nil
	}
	if all || want["latency"] {
		r, err := scenario.IdleLatency(ctx, target, scenario.LatencyParams{Samples: *samples, Gap: 20 * time.Millisecond, Workers: 2})
		r.Scenario = "idle-latency"
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if all || want["throughput"] {
		r, err := scenario.Throughput(ctx, target, scenario.ThroughputParams{Jobs: *jobs, Producers: *producers, Batch: *batch, Workers: *workers, Concurrency: *concurrency})
		r.Scenario = "throughput"
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if all || want["idle"] {
		r, err := scenario.IdleWorkers(ctx, target, scenario.IdleParams{Workers: *idleWorkers, Window: 10 * time.Second, GatewayAdmin: fleet.AdminURLs["dispatch-gateway-1"]})
		r.Scenario = "idle-workers"
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if all || want["backlog"] {
		r, err := scenario.ClaimVsBacklog(ctx, fleet.DatabaseURL, scenario.BacklogParams{Small: 10000, Large: *backlog, Cycles: 200, BatchSize: 100})
		r.Scenario = "claim-backlog"
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if all || want["pause"] {
		r, err := scenario.PauseUnderLoad(ctx, target, scenario.PauseParams{Workers: 4, Concurrency: 32, Busy: 3 * time.Second, Pauses: *pauses, Seed: uint64(time.Now().UnixNano())})
		r.Scenario = "pause"
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if *statements {
		return scenario.PrintTopStatements(ctx, fleet.DatabaseURL, os.Stderr)
	}
	return nil
}
