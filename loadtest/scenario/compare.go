package scenario

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// CompareParams shape the river scenario: the same workloads through pulse,
// through River and as raw SQL on pulse's table, in one fleet's Postgres.
type CompareParams struct {
	Jobs, Producers, Batch int
	Workers, Concurrency   int // pulse's SDK workers × slots; River gets MaxWorkers = the product
	Reps                   int // rounds; each round runs every side once per workload
	RiverMaxWorkers        int // 0: Workers × Concurrency
	RiverPoolConns         int32
	// RiverClients is the River side's worker clients (RiverParams.Clients).
	RiverClients int
	Raw          RawSQLParams // Claimers, ClaimBatch, Completers, CompleteBatch
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

// Workloads of the river scenario.
const (
	WorkloadConcurrent = "concurrent" // N jobs submitted while the workers run
	WorkloadBacklog    = "backlog"    // N jobs inserted first, then worked off
)

// CompareRiver runs each workload through pulse, River and raw SQL, Reps
// times, interleaved (pulse, river, rawsql, pulse, river, rawsql, ...),
// emptying both queue tables and checkpointing before every run. Each run is
// emitted with its CPU seconds per 100k jobs per process and what it wrote
// to Postgres; the returned summary holds the medians and the ratios
// pulse/River (ratio_concurrent, ratio_backlog) and pulse/raw SQL
// (pulse_vs_rawsql).
func CompareRiver(ctx context.Context, t Target, p CompareParams) (Result, error) {
	if p.Reps < 1 {
		p.Reps = 1
	}
	if p.RiverMaxWorkers <= 0 {
		p.RiverMaxWorkers = p.Workers * p.Concurrency
	}
	rs, err := NewRiverSide(ctx, t.DatabaseURL)
	if err != nil {
		return Result{}, err
	}
	tp := ThroughputParams{Jobs: p.Jobs, Producers: p.Producers, Batch: p.Batch, Workers: p.Workers, Concurrency: p.Concurrency}
	rp := RiverParams{Jobs: p.Jobs, Producers: p.Producers, Batch: p.Batch, MaxWorkers: p.RiverMaxWorkers, PoolConns: p.RiverPoolConns, Clients: p.RiverClients}
	raw := p.Raw
	raw.Jobs, raw.Producers, raw.Batch = p.Jobs, p.Producers, p.Batch
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
	// runs[side/workload] holds each run's metrics.
	runs := map[string][]map[string]float64{}
	one := func(side, workload string, rep int, meter MeterOptions,
		run func(before func() error) (Result, error)) error {
		if len(p.Sides) > 0 && !slices.Contains(p.Sides, side) {
			return nil
		}
		if err := reset(); err != nil {
			return fmt.Errorf("%s %s: reset: %w", side, workload, err)
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
				return fmt.Errorf("%s %s: %w", side, workload, err)
			}
			defer release()
		}
		before := BacklogReady(ctx, t.DatabaseURL, p.Settle, start)
		if workload == WorkloadConcurrent {
			if err := start(); err != nil {
				return err
			}
			before = nil
		}
		r, err := run(before)
		if err != nil {
			return fmt.Errorf("%s %s: %w", side, workload, err)
		}
		costs, err := m.Stop(ctx, p.Jobs, p.Settle)
		if err != nil {
			return fmt.Errorf("%s %s: meter: %w", side, workload, err)
		}
		maps.Copy(r.Metrics, costs)
		r.WAL = m.WAL()
		r.Scenario = side + "-" + workload
		r.Params["rep"] = rep + 1
		runs[side+"/"+workload] = append(runs[side+"/"+workload], r.Metrics)
		if p.Emit != nil {
			p.Emit(r)
		}
		return nil
	}
	for rep := range p.Reps {
		for _, workload := range []string{WorkloadConcurrent, WorkloadBacklog} {
			backlog := workload == WorkloadBacklog
			if err := one("pulse", workload, rep, pulseMeter, func(before func() error) (Result, error) {
				if backlog {
					return PulseBacklog(ctx, t, tp, before)
				}
				return Throughput(ctx, t, tp)
			}); err != nil {
				return Result{}, err
			}
			if err := one("river", workload, rep, riverMeter, func(before func() error) (Result, error) {
				if backlog {
					return rs.Backlog(ctx, rp, before)
				}
				return rs.Concurrent(ctx, rp)
			}); err != nil {
				return Result{}, err
			}
			if err := one("rawsql", workload, rep, pulseMeter, func(before func() error) (Result, error) {
				q := raw
				q.Backlog = backlog
				if backlog {
					return RawSQL(ctx, t.DatabaseURL, q, before)
				}
				return RawSQL(ctx, t.DatabaseURL, q, nil)
			}); err != nil {
				return Result{}, err
			}
		}
	}

	out := Result{
		Scenario: "river",
		Params: map[string]any{"jobs": p.Jobs, "producers": p.Producers, "batch": p.Batch,
			"workers": p.Workers, "concurrency": p.Concurrency, "gateways": len(t.GatewayAddrs), "reps": p.Reps,
			"river_max_workers": p.RiverMaxWorkers, "river_pool_conns": p.RiverPoolConns, "river_clients": max(p.RiverClients, 1),
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
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	m := out.Metrics
	m["ratio_concurrent"] = ratio(m["pulse_concurrent_jobs_per_s"], m["river_concurrent_jobs_per_s"])
	m["ratio_backlog"] = ratio(m["pulse_backlog_jobs_per_s"], m["river_backlog_jobs_per_s"])
	m["pulse_vs_rawsql"] = ratio(m["pulse_concurrent_jobs_per_s"], m["rawsql_concurrent_jobs_per_s"])
	m["pulse_vs_rawsql_backlog"] = ratio(m["pulse_backlog_jobs_per_s"], m["rawsql_backlog_jobs_per_s"])
	return out, nil
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
// checkpointed table. With live jobs left by another scenario it deletes
// only the finished ones.
func ResetJobs(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// CASCADE: job_uniques references jobs.
	if _, err := conn.Exec(ctx, `TRUNCATE jobs CASCADE`); err != nil {
		if _, err := conn.Exec(ctx, `DELETE FROM jobs WHERE status IN ('COMPLETED', 'DEAD_LETTERED', 'CANCELED')`); err != nil {
			return err
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
