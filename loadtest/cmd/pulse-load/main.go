// Command pulse-load runs the load-test scenarios against a throwaway local
// fleet (real binaries, real Postgres) or an existing one, and prints each
// result as a JSON line on stdout and a readable line on stderr.
//
//	go run ./loadtest/cmd/pulse-load -scenario all
//	go run ./loadtest/cmd/pulse-load -scenario throughput -jobs 200000 -workers 4 -gateways 2
//	go run ./loadtest/cmd/pulse-load -scenario river                       # River's CLI benchmark, five rounds, pulse in its default fleet shape
//	go run ./loadtest/cmd/pulse-load -scenario rivercli -river-cli ~/river   # River's own CLI beside the harness's River side
//	go run ./loadtest/cmd/pulse-load -scenario scaling -jobs 200000
//	go run ./loadtest/cmd/pulse-load -scenario fanin -fan-width 10000     # a 10,000-parent fan-in and a 10,000-child fan-out, run by one worker
//	go run ./loadtest/cmd/pulse-load -scenario sdk-workers                 # one Go, TypeScript and Python worker each, same fleet
//
// all is latency, throughput, idle, backlog and pause; river (pulse against
// River and the raw-SQL ceiling), rawsql and scaling run only when named.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
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
		which       = flag.String("scenario", "all", "throughput, latency, idle, backlog, pause, or all (comma-separated); river, rawsql, scaling, sdk-workers, waiters and fanin only when named")
		fanWidth    = flag.Int("fan-width", 10000, "fanin: parents of the fan-in, children of the fan-out")
		gateways    = flag.Int("gateways", 0, "dispatch-gateway replicas in the local fleet; 0: the shipped default (localfleet.GatewaysDefault, one) when only river, rawsql, rivercli or soak run, else 2, so that latency, pause and idle cost are measured across replicas")
		jobs        = flag.Int("jobs", 200000, "throughput: jobs to submit; river, rawsql, rivercli: the backlog workload's size (river bench --num-total-jobs)")
		duration    = flag.Duration("duration", 30*time.Second, "river, rawsql, rivercli: the concurrent workload's span (river bench --duration)")
		producers   = flag.Int("producers", 4, "throughput: concurrent producers")
		batch       = flag.Int("batch", 500, "throughput: jobs per SubmitJobs call")
		workers     = flag.Int("workers", 4, "throughput, river: SDK worker processes (in this process); river alone: one per gateway unless given")
		concurrency = flag.Int("concurrency", 256, "throughput, river: handler slots per worker; river alone and soak: River's MaxWorkers (2,000) split over the workers unless given")
		samples     = flag.Int("samples", 300, "latency: jobs submitted one at a time")
		pauses      = flag.Int("pauses", 120, "pause: pause/resume rounds (random scope and mode), judged by commit order")
		idleWorkers = flag.Int("idle-workers", 1000, "idle: connected idle workers")
		waiters     = flag.Int("waiters", 10000, "waiters: concurrent Client.Wait calls, each on a job of its own")
		waitWindow  = flag.Duration("waiters-window", 65*time.Second, "waiters: how long the database's transactions are counted, idle and with every waiter waiting; longer than two of the SDK's 30 s long-polls, so every waiter renews twice in it")
		backlog     = flag.Int("backlog", 1000000, "backlog: the large backlog size")
		fast        = flag.Bool("fast-pg", false, "run the throwaway Postgres with fsync and synchronous_commit off")
		loadedRate  = flag.Float64("loaded-rate", 0, "loaded-latency: the background load in jobs/s; 0: half the maximum the scenario measures first")
		pgSettings  = flag.String("pg-settings", "", "extra postgresql.conf settings for the throwaway Postgres, KEY=VALUE pairs separated by commas, after the harness's own (e.g. max_wal_size=1GB, Postgres's default)")
		cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of this process (producers and SDK workers) to the file")
		statements  = flag.Bool("pg-stat-statements", false, "load pg_stat_statements and print the top statements by total time at the end")
		warmup      = flag.Int("warmup", 1, "river: rounds run first and reported apart (warmup_ratio_*), outside the medians and minimum: a fresh fleet's first round pays for its processes' memory growing")
		reps        = flag.Int("reps", 0, "river, rawsql, rivercli, scaling: rounds (river interleaves pulse, river, rawsql in each); 0: five for river, three otherwise; medians and (river) each round's ratio and their minimum are reported")
		settle      = flag.Duration("stats-settle", scenario.StatsSettle, "river, rawsql, scaling: wait after each run before reading Postgres's cumulative counters (xacts, WAL records, rows); 0 skips them")
		serviceEnv  = flag.String("service-env", "", "extra environment for the fleet's services, KEY=VALUE pairs separated by commas (e.g. GOMAXPROCS=1)")
		sides       = flag.String("sides", "pulse,river,rawsql", "river: which sides run, comma-separated (pulse, river, rawsql); the ratios need pulse and river")
		holdSnap    = flag.Bool("hold-snapshot", false, "river: keep a transaction with a snapshot open in each run's database for the whole run, as a long report query would")
		soakFor     = flag.Duration("soak-duration", 30*time.Minute, "soak: how long each side runs")
		soakRate    = flag.Float64("soak-rate", 0, "soak: jobs/s; 0: 70 % of the side's sustained maximum, measured first (the river scenario's concurrent workload for -soak-probe, counted after -soak-probe-warm, the soak's retention deleting)")
		soakProbe   = flag.Duration("soak-probe", 4*time.Minute, "soak: how long the maximum is measured when -soak-rate is 0")
		soakWarm    = flag.Duration("soak-probe-warm", 2*time.Minute, "soak: how much of the probe runs before its rate is counted (longer than the retention, so the cleaner deletes throughout the count)")
		soakSnapAt  = flag.Duration("soak-snapshot-at", 10*time.Minute, "soak: when the analytics snapshot opens")
		soakSnapFor = flag.Duration("soak-snapshot-for", 10*time.Minute, "soak: how long it stays open (0: none)")
		soakKeep    = flag.Duration("soak-retention", time.Minute, "soak: how old a completed job gets before the cleaner deletes it (pulse: the reaper's PULSE_RETENTION_COMPLETED, its interval and batch left at their defaults; River: CompletedJobRetentionPeriod)")
		soakEvery   = flag.Duration("soak-interval", time.Minute, "soak: one row of the table per interval")
		riverCLI    = flag.String("river-cli", "", "rivercli: River's own CLI binary (built from River's source), run as `river bench` beside the harness's River side")
		rawClaimers = flag.Int("rawsql-claimers", 2, "rawsql: claim loops, each one claim in flight resuming after its last job (a gateway's claim loop)")
		rawClaimN   = flag.Int("rawsql-claim-batch", 500, "rawsql: jobs per claim")
		rawSettlers = flag.Int("rawsql-completers", 2, "rawsql: completion loops, shared out over the claim loops (a gateway's report flusher)")
		rawSettleN  = flag.Int("rawsql-complete-batch", 1000, "rawsql: at most this many jobs per completion statement (it folds what was claimed meanwhile)")
		scaleSizes  = flag.String("scaling-gateways", "1,2,4", "scaling: gateway counts, a fresh fleet each")
		timeout     = flag.Duration("timeout", time.Hour, "give up after this long")
		cooldown    = flag.Duration("claim-cooldown", -1, "the gateways' PULSE_CLAIM_COOLDOWN; negative: the gateway's default")
		sdkList     = flag.String("sdks", strings.Join(scenario.SDKWorkers, ","), "sdk-workers: the SDKs whose worker runs, comma-separated")
		sdkJobs     = flag.Int("sdk-jobs", 50000, "sdk-workers: the backlog each SDK's worker works off, per round")
		sdkConc     = flag.Int("sdk-concurrency", 100, "sdk-workers: the slots of each SDK's one worker")
		walStats    = flag.Bool("wal-stats", false, "throughput, river, rawsql, scaling: break each run's WAL down by record type per job (pg_waldump; keeps 4 GB of WAL)")
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
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	want := map[string]bool{}
	for _, s := range strings.Split(*which, ",") {
		want[strings.TrimSpace(s)] = true
	}
	all := want["all"]
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if *gateways < 0 {
		return fmt.Errorf("-gateways: %d; a fleet needs at least one gateway (0 picks the default)", *gateways)
	}
	if *gateways == 0 {
		*gateways = defaultGateways(want)
	}
	if riverOnly(want) {
		*workers, *concurrency = riverWorkers(*gateways, given["workers"], *workers, given["concurrency"], *concurrency)
	}
	if *workers < 1 || *concurrency < 1 {
		return fmt.Errorf("-workers %d -concurrency %d: a worker needs at least one slot, and a run at least one worker", *workers, *concurrency)
	}
	if *duration <= 0 {
		return fmt.Errorf("-duration: %s; the concurrent workload needs a span", *duration)
	}
	if *reps < 0 {
		return fmt.Errorf("-reps: %d; at least one round (0 picks the default)", *reps)
	}
	if *warmup < 0 {
		return fmt.Errorf("-warmup: %d; zero or more rounds", *warmup)
	}
	if *loadedRate < 0 || math.IsNaN(*loadedRate) || math.IsInf(*loadedRate, 0) {
		return fmt.Errorf("-loaded-rate: %v; a rate in jobs/s, or 0 for half the measured maximum", *loadedRate)
	}
	if *reps == 0 {
		*reps = 3
		if want["river"] {
			*reps = 5
		}
	}
	if want["rivercli"] && *riverCLI == "" {
		return errors.New("-scenario rivercli needs -river-cli: the path of River's CLI built from its source (see docs/benchmarks.md)")
	}

	env := map[string]string{"PULSE_LOG_LEVEL": "warn"}
	if want["soak"] {
		env["PULSE_RETENTION_COMPLETED"] = soakKeep.String()
		*statements = true // the claim statement's time, per interval
	}
	if *cooldown >= 0 {
		env["PULSE_CLAIM_COOLDOWN"] = cooldown.String()
	}
	for _, kv := range strings.Split(*serviceEnv, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k != "" {
			env[k] = v
		} else if strings.TrimSpace(kv) != "" {
			return fmt.Errorf("-service-env: %q is not KEY=VALUE", kv)
		}
	}
	// Open (PULSE_AUTH=none): the load clients bring no credentials, and
	// the numbers stay comparable with earlier runs.
	opts := localfleet.Options{Gateways: *gateways, Env: env, Logger: logger, Reaper: true, Open: true}
	opts.DurablePostgres = !*fast
	// Checkpoints come by time (checkpoint_timeout, 5 minutes), not by WAL
	// volume: with Postgres's default max_wal_size (1 GB) a queue writing
	// 15 MB of WAL a second checkpoints every 35 s or so, and the first
	// change to every page after each checkpoint writes the whole page
	// into the WAL. A deployment that writes at these rates sizes it so
	// (docs/operations.md, "Postgres itself"); both sides of a comparison run on
	// this one cluster.
	opts.PostgresSettings = map[string]string{"max_wal_size": "'" + benchMaxWALSize + "'"}
	if *statements {
		opts.PostgresSettings["shared_preload_libraries"] = "'pg_stat_statements'"
	}
	if *walStats {
		// The run's WAL must still be there when pg_waldump reads it.
		opts.PostgresSettings["wal_keep_size"] = "'4GB'"
	}
	if want["pause"] || all {
		// The pause scenario judges by commit time (claimwitness).
		opts.PostgresSettings["track_commit_timestamp"] = "on"
	}
	for _, kv := range strings.Split(*pgSettings, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k != "" {
			opts.PostgresSettings[k] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		} else if strings.TrimSpace(kv) != "" {
			return fmt.Errorf("-pg-settings: %q is not KEY=VALUE", kv)
		}
	}
	fmt.Fprintf(os.Stderr, "machine: %d CPUs, %s/%s, Go %s; Postgres on the same machine (fast=%v)\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), *fast)
	emit := func(r scenario.Result, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", r.Scenario, err)
		}
		b, _ := json.Marshal(r) //nolint:errchkjson // a Result is strings and numbers
		fmt.Println(string(b))
		fmt.Fprintln(os.Stderr, r.Line())
		return nil
	}
	emitRun := func(r scenario.Result) { _ = emit(r, nil) }
	tp := scenario.ThroughputParams{Jobs: *jobs, Producers: *producers, Batch: *batch, Workers: *workers, Concurrency: *concurrency}
	raw := scenario.RawSQLParams{Claimers: *rawClaimers, ClaimBatch: *rawClaimN, Completers: *rawSettlers, CompleteBatch: *rawSettleN}
	workloads := []scenario.BenchWorkload{
		{Mode: scenario.WorkloadConcurrent, Duration: *duration},
		{Mode: scenario.WorkloadBacklog, Total: *jobs},
	}

	// scaling starts a fleet per gateway count; everything else shares one.
	needFleet := all
	for s := range want {
		needFleet = needFleet || (s != "scaling" && s != "")
	}
	if !needFleet {
		return runScaling(ctx, opts, *scaleSizes, tp, *reps, *settle, *walStats, emit, emitRun)
	}
	fleet, err := localfleet.Up(ctx, opts)
	if err != nil {
		return err
	}
	defer func() { _ = fleet.Down() }() // stopping the throwaway fleet cannot change the results
	target := scenario.Target{ControlHTTP: fleet.ControlHTTP, ControlGRPC: fleet.ControlGRPC, GatewayAddrs: fleet.GatewayAddrs,
		DatabaseURL: fleet.DatabaseURL, PIDs: fleet.PIDs()}
	if *walStats && fleet.Cluster != nil {
		target.WALDataDir = fleet.Cluster.DataDir()
	}
	if *statements {
		scenario.EnableStatements(ctx, fleet.DatabaseURL)
	}
	if all || want["latency"] {
		r, err := scenario.IdleLatency(ctx, target, scenario.LatencyParams{Samples: *samples, Gap: 20 * time.Millisecond, Workers: 2})
		r.Scenario = "idle-latency"
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if want["loaded-latency"] {
		r, err := scenario.LoadedLatency(ctx, target, scenario.LatencyParams{Samples: *samples, Gap: 20 * time.Millisecond, Workers: 2},
			scenario.PulseBenchParams{Workers: *workers, Concurrency: *concurrency}, 0.5, *loadedRate)
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if all || want["throughput"] {
		// CPU per process and WAL bytes per job; the counters that need a
		// settle wait are left to the river and scaling scenarios.
		m, err := scenario.StartMeter(ctx, target.PIDs, scenario.MeterOptions{DatabaseURL: target.DatabaseURL, WALDataDir: target.WALDataDir})
		if err != nil {
			return err
		}
		r, err := scenario.Throughput(ctx, target, tp)
		r.Scenario = "throughput"
		if err == nil {
			var costs map[string]float64
			if costs, err = m.Stop(ctx, *jobs, 0); err == nil {
				maps.Copy(r.Metrics, costs)
				r.WAL = m.WAL()
			}
		}
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
	if want["fanin"] {
		r, err := scenario.FanIn(ctx, target, scenario.FanInParams{Width: *fanWidth, Batch: *batch})
		r.Scenario = "fanin"
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if want["waiters"] {
		r, err := scenario.Waiters(ctx, target, scenario.WaitersParams{Waiters: *waiters, Window: *waitWindow})
		r.Scenario = "waiters"
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
	if want["river"] {
		r, err := scenario.CompareRiver(ctx, target, scenario.CompareParams{
			Pulse:    scenario.PulseBenchParams{Workers: *workers, Concurrency: *concurrency},
			Duration: *duration, Total: *jobs, Reps: *reps, Warmup: *warmup, Raw: raw,
			Settle: *settle, Emit: emitRun, Sides: strings.Split(*sides, ","), HoldSnapshot: *holdSnap,
		})
		r.Scenario = "river"
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if want["rawsql"] {
		for rep := range *reps {
			for _, w := range workloads {
				r, err := rawSQLRun(ctx, target, raw, w, *settle)
				if err == nil {
					r.Params["rep"] = rep + 1
				}
				if err := emit(r, err); err != nil {
					return err
				}
			}
		}
	}
	if want["soak"] {
		sp := scenario.SoakParams{Duration: *soakFor, Rate: *soakRate, Probe: *soakProbe, ProbeWarm: *soakWarm, SnapshotAt: *soakSnapAt, SnapshotFor: *soakSnapFor,
			RetentionAge: *soakKeep, Interval: *soakEvery, Pulse: scenario.PulseBenchParams{Workers: *workers, Concurrency: *concurrency},
			Emit: emitRun, Out: os.Stderr}
		if slices.Contains(strings.Split(*sides, ","), "pulse") {
			if err := emit(scenario.PulseSoak(ctx, target, sp)); err != nil {
				return err
			}
		}
		if slices.Contains(strings.Split(*sides, ","), "river") {
			rs, err := scenario.NewRiverSide(ctx, target.DatabaseURL)
			if err != nil {
				return err
			}
			if err := emit(rs.RiverSoak(ctx, target.DatabaseURL, sp)); err != nil {
				return err
			}
		}
	}
	if want["sdk-workers"] {
		root, err := localfleet.FindRepoRoot(".")
		if err != nil {
			return err
		}
		r, err := scenario.SDKWorkerThroughput(ctx, target, scenario.SDKWorkerParams{
			RepoRoot: root, SDKs: strings.Split(*sdkList, ","), Jobs: *sdkJobs, Concurrency: *sdkConc, Reps: *reps, Emit: emitRun,
		})
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if want["rivercli"] {
		r, err := scenario.CalibrateRiver(ctx, target.DatabaseURL, scenario.CalibrateParams{
			CLI: *riverCLI, Duration: *duration, Total: *jobs, Reps: *reps, Emit: emitRun,
		})
		r.Scenario = "rivercli"
		if err := emit(r, err); err != nil {
			return err
		}
	}
	if want["scaling"] {
		if err := runScaling(ctx, opts, *scaleSizes, tp, *reps, *settle, *walStats, emit, emitRun); err != nil {
			return err
		}
	}
	if *statements {
		return scenario.PrintTopStatements(ctx, fleet.DatabaseURL, os.Stderr)
	}
	return nil
}

// defaultGateways is the fleet's size when -gateways is not given: for a
// comparison with River alone (and the soak), the shipped default, so
// that what is measured is what users run (ADR-0039); for every other
// scenario two, so that pause, latency and idle cost are measured across
// replicas.
func defaultGateways(want map[string]bool) int {
	if riverOnly(want) {
		return localfleet.GatewaysDefault
	}
	return 2
}

// riverSlots is the comparison's slot count when neither -workers nor
// -concurrency is given: River's MaxWorkers in its CLI's benchmark, so
// both sides run as many handlers at once (ADR-0065).
const riverSlots = scenario.RiverMaxWorkers

// benchMaxWALSize is the throwaway Postgres's max_wal_size. Postgres asks
// for a checkpoint once the WAL since the last one passes max_wal_size /
// (1 + checkpoint_completion_target), 4.2 GB here: at the soak's 9,500
// jobs/s (about 15 MB of WAL a second) checkpoints come from
// checkpoint_timeout (5 minutes); at the comparison's 20,000-30,000 jobs/s
// every two to three minutes, never inside one of its rounds, each of
// which starts from a CHECKPOINT.
const benchMaxWALSize = "8GB"

// riverWorkers is pulse's side of a comparison with River alone: one SDK
// worker per gateway, each starting at a different one, with its share of
// riverSlots. A flag given keeps its value; -concurrency stays per worker,
// so with -workers given alone the slots are still split over them.
func riverWorkers(gateways int, workersGiven bool, workers int, concGiven bool, conc int) (int, int) {
	if !workersGiven {
		workers = gateways
	}
	if !concGiven && workers > 0 {
		conc = max(riverSlots/workers, 1)
	}
	return workers, conc
}

// riverOnly reports whether the run compares pulse with River alone: river
// or soak, with or without each other, rawsql and rivercli (which need no
// gateway and no SDK worker).
func riverOnly(want map[string]bool) bool {
	if !want["river"] && !want["soak"] {
		return false
	}
	for s := range want {
		if s != "river" && s != "rawsql" && s != "rivercli" && s != "soak" && s != "" {
			return false
		}
	}
	return true
}

// rawSQLRun is one metered raw-SQL ceiling run of w on a freshly emptied
// jobs table.
func rawSQLRun(ctx context.Context, t scenario.Target, p scenario.RawSQLParams, w scenario.BenchWorkload, settle time.Duration) (scenario.Result, error) {
	r := scenario.Result{Scenario: "rawsql"}
	if err := scenario.ResetJobs(ctx, t.DatabaseURL); err != nil {
		return r, err
	}
	var m *scenario.Meter
	before := func() error {
		var err error
		m, err = scenario.StartMeter(ctx, t.PIDs, scenario.MeterOptions{DatabaseURL: t.DatabaseURL, Table: "jobs", WALDataDir: t.WALDataDir})
		return err
	}
	if w.Mode == scenario.WorkloadBacklog {
		before = scenario.BacklogReady(ctx, t.DatabaseURL, settle, before)
	}
	r, err := scenario.RawSQL(ctx, t.DatabaseURL, p, w, before)
	if err != nil {
		return scenario.Result{Scenario: "rawsql"}, err
	}
	costs, err := m.Stop(ctx, int(r.Metrics["jobs"]), settle)
	if err != nil {
		return r, err
	}
	maps.Copy(r.Metrics, costs)
	r.WAL = m.WAL()
	return r, nil
}

// runScaling runs the scaling scenario: a fleet per gateway count, the
// binaries built once for all of them.
func runScaling(ctx context.Context, opts localfleet.Options, sizes string, tp scenario.ThroughputParams, reps int, settle time.Duration, walStats bool,
	emit func(scenario.Result, error) error, emitRun func(scenario.Result)) error {
	var counts []int
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-scaling-gateways: %q is not a gateway count", s)
		}
		counts = append(counts, n)
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := localfleet.FindRepoRoot(wd)
	if err != nil {
		return err
	}
	binDir, err := os.MkdirTemp("", "pulse-load-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	names := []string{localfleet.ControlAPI, localfleet.DispatchGateway}
	if _, err := os.Stat(filepath.Join(root, "services", localfleet.Reaper, "main.go")); err == nil && opts.Reaper {
		names = append(names, localfleet.Reaper)
	} else {
		opts.Reaper = false
	}
	bins, err := localfleet.Build(ctx, root, binDir, names...)
	if err != nil {
		return err
	}
	opts.RepoRoot, opts.Binaries = root, bins
	up := func(ctx context.Context, gateways int) (scenario.Target, func() error, error) {
		o := opts
		o.Gateways = gateways
		f, err := localfleet.Up(ctx, o)
		if err != nil {
			return scenario.Target{}, nil, err
		}
		t := scenario.Target{ControlHTTP: f.ControlHTTP, ControlGRPC: f.ControlGRPC, GatewayAddrs: f.GatewayAddrs,
			DatabaseURL: f.DatabaseURL, PIDs: f.PIDs()}
		if walStats && f.Cluster != nil {
			t.WALDataDir = f.Cluster.DataDir()
		}
		return t, f.Down, nil
	}
	rs, err := scenario.Scaling(ctx, up, scenario.ScalingParams{Gateways: counts, Throughput: tp, Reps: reps, Settle: settle, Emit: emitRun})
	for _, r := range rs {
		_ = emit(r, nil)
	}
	if err != nil {
		return fmt.Errorf("scaling: %w", err)
	}
	scenario.ScalingTable(os.Stderr, rs)
	return nil
}
