package scenario

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// CompareParams shape the river scenario: River's own CLI benchmark
// workloads (BenchWorkload) through pulse, through River and as raw SQL on
// pulse's table, in one fleet's Postgres.
type CompareParams struct {
	Pulse PulseBenchParams
	// Duration is the concurrent workload's span (river bench --duration);
	// Total the backlog workload's size (river bench --num-total-jobs).
	Duration time.Duration
	Total    int
	Reps     int          // rounds; each round runs every side once per workload
	Raw      RawSQLParams // Claimers, ClaimBatch, Completers, CompleteBatch
	// Warmup rounds run first, exactly as the measured rounds do, and are
	// reported apart (warmup_ratio_<workload>_rounds), outside the
	// medians and the minimum. In the two sittings recorded without one,
	// the first round was pulse's worst on both workloads; in the second,
	// its first backlog run used 20–25 % more CPU per job in every pulse
	// process than the later ones, at the same buffers and WAL per job.
	Warmup int
	// Settle is the wait before reading Postgres's cumulative counters
	// after each run (StatsSettle); 0 reports CPU and WAL bytes only.
	Settle time.Duration
	// Emit receives each run's own result as it finishes.
	Emit func(Result)
	// Sides names the sides that run ("pulse", "river", "rawsql"); empty:
	// all three. A ratio whose sides did not both run is 0.
	Sides []string
	// HoldSnapshot keeps a transaction with a snapshot open in each run's
	// database for the whole run, as a long report query or a pg_dump
	// would: Postgres can then mark no index entry of a job claimed during
	// the run dead.
	HoldSnapshot bool
}

// CompareRiver runs each workload through pulse, River and raw SQL, Reps
// times, interleaved (pulse, river, rawsql, pulse, river, rawsql, ...),
// emptying both queue tables and checkpointing before every run. Each run is
// emitted with its CPU seconds per 100k jobs per process and what it wrote
// to Postgres; the returned summary holds, per workload, the medians, each
// round's pulse/River ratio and its minimum (ratio_concurrent_min,
// ratio_backlog_min: the round pulse did worst against River), and
// pulse/raw SQL.
func CompareRiver(ctx context.Context, t Target, p CompareParams) (Result, error) {
	if p.Reps < 1 {
		p.Reps = 1
	}
	rs, err := NewRiverSide(ctx, t.DatabaseURL)
	if err != nil {
		return Result{}, err
	}
	pulseMeter := MeterOptions{DatabaseURL: t.DatabaseURL, Table: "jobs", WALDataDir: t.WALDataDir}
	riverMeter := MeterOptions{DatabaseURL: t.DatabaseURL, Table: "river_job", TableDatabaseURL: rs.URL(), WALDataDir: t.WALDataDir}

	// Every run empties both queue tables, not only its own: a table left
	// full of the last run's dead row versions is vacuum work that
	// autovacuum would do during the next run, charged to whichever side
	// that is (the meter counts every Postgres process).
	reset := func() error {
		if err := ResetJobs(ctx, t.DatabaseURL); err != nil {
			return err
		}
		return rs.Reset(ctx)
	}
	// runs[side/workload] holds each measured run's metrics, in round
	// order; warm the warmup rounds'.
	runs := map[string][]map[string]float64{}
	warm := map[string][]map[string]float64{}
	one := func(side string, w BenchWorkload, rep int, meter MeterOptions,
		run func(before func() error) (Result, error)) error {
		if len(p.Sides) > 0 && !slices.Contains(p.Sides, side) {
			return nil
		}
		if err := reset(); err != nil {
			return fmt.Errorf("%s %s: reset: %w", side, w.Mode, err)
		}
		var m *Meter
		start := func() error {
			var err error
			m, err = StartMeter(ctx, t.PIDs, meter)
			return err
		}
		if p.HoldSnapshot {
			url := meter.TableDatabaseURL
			if url == "" {
				url = meter.DatabaseURL
			}
			release, err := HoldSnapshot(ctx, url)
			if err != nil {
				return fmt.Errorf("%s %s: %w", side, w.Mode, err)
			}
			defer release()
		}
		before := start
		if w.Mode == WorkloadBacklog {
			before = BacklogReady(ctx, t.DatabaseURL, p.Settle, start)
		}
		r, err := run(before)
		if err != nil {
			return fmt.Errorf("%s %s: %w", side, w.Mode, err)
		}
		costs, err := m.Stop(ctx, int(r.Metrics["jobs"]), p.Settle)
		if err != nil {
			return fmt.Errorf("%s %s: meter: %w", side, w.Mode, err)
		}
		maps.Copy(r.Metrics, costs)
		r.WAL = m.WAL()
		if rep < p.Warmup {
			r.Params["rep"] = fmt.Sprintf("warmup %d", rep+1)
			warm[side+"/"+w.Mode] = append(warm[side+"/"+w.Mode], r.Metrics)
		} else {
			r.Params["rep"] = rep - p.Warmup + 1
			runs[side+"/"+w.Mode] = append(runs[side+"/"+w.Mode], r.Metrics)
		}
		if p.Emit != nil {
			p.Emit(r)
		}
		return nil
	}
	workloads := []BenchWorkload{
		{Mode: WorkloadConcurrent, Duration: p.Duration},
		{Mode: WorkloadBacklog, Total: p.Total},
	}
	for rep := range p.Warmup + p.Reps {
		for _, w := range workloads {
			if err := one("pulse", w, rep, pulseMeter, func(before func() error) (Result, error) {
				return PulseBench(ctx, t, p.Pulse, w, before)
			}); err != nil {
				return Result{}, err
			}
			if err := one("river", w, rep, riverMeter, func(before func() error) (Result, error) {
				return rs.Bench(ctx, w, before)
			}); err != nil {
				return Result{}, err
			}
			if err := one("rawsql", w, rep, pulseMeter, func(before func() error) (Result, error) {
				return RawSQL(ctx, t.DatabaseURL, p.Raw, w, before)
			}); err != nil {
				return Result{}, err
			}
		}
	}

	raw := p.Raw
	out := Result{
		Scenario: "river",
		Params: map[string]any{"duration": p.Duration.String(), "total": p.Total,
			"workers": p.Pulse.Workers, "concurrency": p.Pulse.Concurrency, "gateways": len(t.GatewayAddrs), "reps": p.Reps, "warmup_rounds": p.Warmup,
			"insert_batch": BenchInsertBatch, "min_jobs": BenchMinJobs,
			"river_max_workers":    RiverMaxWorkers,
			"river_fetch_cooldown": RiverFetchCooldown.String(), "river_fetch_poll_interval": RiverFetchPollInterval.String(),
			"rawsql_claimers": raw.Claimers, "rawsql_claim_batch": raw.ClaimBatch,
			"rawsql_completers": raw.Completers, "rawsql_complete_batch": raw.CompleteBatch,
			"hold_snapshot": p.HoldSnapshot},
		Metrics: map[string]float64{},
	}
	med := func(key, metric string) float64 { return median(runs[key], metric) }
	for _, side := range []string{"pulse", "river", "rawsql"} {
		for _, w := range []string{WorkloadConcurrent, WorkloadBacklog} {
			k := side + "/" + w
			out.Metrics[side+"_"+w+"_jobs_per_s"] = med(k, "jobs_per_s")
			out.Metrics[side+"_"+w+"_cpu_s_per_100k_total"] = med(k, "cpu_s_per_100k_total")
			out.Metrics[side+"_"+w+"_buffers_per_job"] = med(k, "buffers_per_job")
			out.Params[side+"_"+w+"_runs"] = rates(runs[k])
		}
	}
	m := out.Metrics
	for _, w := range []string{WorkloadConcurrent, WorkloadBacklog} {
		per := roundRatios(runs["pulse/"+w], runs["river/"+w])
		out.Params["ratio_"+w+"_rounds"] = per
		if p.Warmup > 0 {
			out.Params["warmup_ratio_"+w+"_rounds"] = roundRatios(warm["pulse/"+w], warm["river/"+w])
		}
		m["ratio_"+w] = ratio(m["pulse_"+w+"_jobs_per_s"], m["river_"+w+"_jobs_per_s"])
		if len(per) > 0 {
			m["ratio_"+w+"_min"] = slices.Min(per)
		}
	}
	m["pulse_vs_rawsql"] = ratio(m["pulse_concurrent_jobs_per_s"], m["rawsql_concurrent_jobs_per_s"])
	m["pulse_vs_rawsql_backlog"] = ratio(m["pulse_backlog_jobs_per_s"], m["rawsql_backlog_jobs_per_s"])
	return out, nil
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// roundRatios is pulse's rate over River's, round by round (rounds both
// sides ran), to two decimals.
func roundRatios(pulse, river []map[string]float64) []float64 {
	out := make([]float64, 0, min(len(pulse), len(river)))
	for i := range min(len(pulse), len(river)) {
		r := ratio(pulse[i]["jobs_per_s"], river[i]["jobs_per_s"])
		out = append(out, math.Round(r*100)/100)
	}
	return out
}

// HoldSnapshot opens a REPEATABLE READ transaction on databaseURL and
// takes its snapshot, holding back the database's horizon (what vacuum
// and index scans may treat as dead) until release. It locks no table.
// Postgres computes the horizon per database, so it must be the queue
// table's own.
func HoldSnapshot(ctx context.Context, databaseURL string) (release func(), err error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("hold snapshot: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT 1`)
	}
	if err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("hold snapshot: %w", err)
	}
	return func() {
		_ = tx.Rollback(context.Background())
		_ = conn.Close(context.Background())
	}, nil
}

// BacklogReady is what runs between a backlog's inserts and its work-off:
// wait settle, so the inserts' statistics are flushed before the meter
// reads its starting point (see StatsSettle), CHECKPOINT, so every work-off
// starts from a clean checkpoint and pays the same full-page writes, then
// start (the meter).
func BacklogReady(ctx context.Context, databaseURL string, settle time.Duration, start func() error) func() error {
	return func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(settle):
		}
		conn, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			return err
		}
		_, err = conn.Exec(ctx, `CHECKPOINT`)
		conn.Close(ctx)
		if err != nil {
			return err
		}
		return start()
	}
}

// ResetJobs empties pulse's jobs table between runs (TRUNCATE, which the
// schema allows once no job is live; VACUUM FULL; CHECKPOINT), as River's
// bench does with river_job, so every run starts from the same empty,
// checkpointed table. Live jobs left by another run are canceled first.
func ResetJobs(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// CASCADE: job_uniques references jobs. The schema refuses to
	// truncate live jobs (a concurrent workload leaves its inserter's lead
	// queued, and a stopped worker's last leases may still run): cancel
	// them first, through the store's own bulk cancel, so no run starts
	// with another run's queue in front of it.
	if _, err := conn.Exec(ctx, `TRUNCATE jobs CASCADE`); err != nil {
		pool, err := pgxpool.New(ctx, databaseURL)
		if err != nil {
			return err
		}
		_, err = jobstore.New(pool).CancelMatching(ctx, jobstore.BulkFilter{}, 10000)
		pool.Close()
		if err != nil {
			return fmt.Errorf("cancel the live jobs left: %w", err)
		}
		if _, err := conn.Exec(ctx, `TRUNCATE jobs CASCADE`); err != nil {
			return fmt.Errorf("truncate jobs: %w", err)
		}
	}
	for _, q := range []string{`VACUUM FULL jobs`, `CHECKPOINT`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

func median(runs []map[string]float64, metric string) float64 {
	var vs []float64
	for _, r := range runs {
		if v, ok := r[metric]; ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

func rates(runs []map[string]float64) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = float64(int(r["jobs_per_s"]))
	}
	return out
}
