package scenario

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strings"
	"time"
)

// ScalingParams shape the scaling run: the throughput workload on a fresh
// fleet (one Postgres) per gateway count.
type ScalingParams struct {
	Gateways   []int
	Throughput ThroughputParams
	Reps       int
	Settle     time.Duration // StatsSettle; 0 reports CPU and WAL bytes only
	Emit       func(Result)  // each run's own result
}

// FleetUp starts a fleet with n gateways and returns its target and how
// to stop it.
type FleetUp func(ctx context.Context, gateways int) (Target, func() error, error)

// Scaling runs the throughput workload Reps times on a fleet per gateway
// count, and returns one result per count with the medians: jobs/s, CPU
// seconds per 100k jobs per process, WAL bytes, transactions (and, with
// pg_stat_statements preloaded, statements) and row versions per job.
func Scaling(ctx context.Context, up FleetUp, p ScalingParams) ([]Result, error) {
	if p.Reps < 1 {
		p.Reps = 1
	}
	var out []Result
	for _, n := range p.Gateways {
		r, err := scalingSize(ctx, up, n, p)
		if err != nil {
			return out, fmt.Errorf("%d gateways: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func scalingSize(ctx context.Context, up FleetUp, n int, p ScalingParams) (_ Result, err error) {
	t, down, err := up(ctx, n)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if derr := down(); err == nil && derr != nil {
			err = derr
		}
	}()
	statements := EnableStatements(ctx, t.DatabaseURL)
	var runs []map[string]float64
	for rep := range p.Reps {
		if err := ResetJobs(ctx, t.DatabaseURL); err != nil {
			return Result{}, err
		}
		m, err := StartMeter(ctx, t.PIDs, MeterOptions{DatabaseURL: t.DatabaseURL, Table: "jobs", WALDataDir: t.WALDataDir})
		if err != nil {
			return Result{}, err
		}
		r, err := Throughput(ctx, t, p.Throughput)
		if err != nil {
			return Result{}, err
		}
		costs, err := m.Stop(ctx, p.Throughput.Jobs, p.Settle)
		if err != nil {
			return Result{}, err
		}
		maps.Copy(r.Metrics, costs)
		r.WAL = m.WAL()
		r.Scenario = fmt.Sprintf("scaling-%dgw", n)
		r.Params["rep"] = rep + 1
		runs = append(runs, r.Metrics)
		if p.Emit != nil {
			p.Emit(r)
		}
	}
	res := Result{
		Scenario: "scaling",
		Params: map[string]any{"gateways": n, "jobs": p.Throughput.Jobs, "workers": p.Throughput.Workers,
			"concurrency": p.Throughput.Concurrency, "producers": p.Throughput.Producers, "batch": p.Throughput.Batch,
			"reps": p.Reps, "pg_stat_statements": statements, "runs": rates(runs)},
		Metrics: map[string]float64{},
	}
	for k := range runs[0] {
		switch {
		case strings.HasPrefix(k, "wait_"), k == "elapsed_s":
			continue
		}
		res.Metrics[k] = median(runs, k)
	}
	return res, nil
}

// ScalingTable writes the scaling results as a Markdown table, the rows
// docs/scaling.md's table wants.
func ScalingTable(w io.Writer, rs []Result) {
	fmt.Fprintln(w, "| gateways | jobs/s | CPU s/100k: Postgres | gateways | control-api | load | WAL bytes/job | xacts/job | statements/job | rows updated/job | HOT % |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		m := r.Metrics
		opt := func(k, format string) string {
			if v, ok := m[k]; ok {
				return fmt.Sprintf(format, v)
			}
			return "–"
		}
		fmt.Fprintf(w, "| %v | %.0f | %.1f | %.1f | %.1f | %.1f | %.0f | %s | %s | %s | %s |\n",
			r.Params["gateways"], m["jobs_per_s"], m["cpu_s_per_100k_postgres"], m["cpu_s_per_100k_gateways"],
			m["cpu_s_per_100k_control_api"], m["cpu_s_per_100k_load"], m["wal_bytes_per_job"],
			opt("xacts_per_job", "%.3f"), opt("statements_per_job", "%.3f"),
			opt("rows_updated_per_job", "%.2f"), opt("hot_update_pct", "%.0f"))
	}
}
