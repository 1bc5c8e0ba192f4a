package scenario

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// CalibrateParams shape the rivercli scenario: River's own CLI (built from
// River's source) and the harness's River side, run one after the other on
// the same database, Reps rounds of both workloads.
type CalibrateParams struct {
	CLI      string // the river binary
	Duration time.Duration
	Total    int
	Reps     int
	Emit     func(Result)
}

// riverCLIRate is the summary line `river bench` prints when it ends:
// "bench: total jobs worked [ N ], total jobs inserted [ M ], overall job/sec [ R ], running D".
var riverCLIRate = regexp.MustCompile(`overall job/sec \[\s*([0-9.]+)\s*\]`)

// CalibrateRiver checks that the harness's River side (RiverSide.Bench) is
// River's own benchmark: each round runs `river bench --duration` and
// `river bench --num-total-jobs` with River's CLI, and the same workload
// through the harness, on the same database (the CLI empties river_job
// before it runs, as RiverSide.Reset does). The summary holds both sides'
// medians and harness/CLI per workload (cli_ratio_concurrent,
// cli_ratio_backlog), which should be within 10 % of 1.
func CalibrateRiver(ctx context.Context, databaseURL string, p CalibrateParams) (Result, error) {
	rs, err := NewRiverSide(ctx, databaseURL)
	if err != nil {
		return Result{}, err
	}
	workloads := []BenchWorkload{
		{Mode: WorkloadConcurrent, Duration: p.Duration},
		{Mode: WorkloadBacklog, Total: p.Total},
	}
	rates := map[string][]float64{}
	for rep := range max(p.Reps, 1) {
		for _, w := range workloads {
			cli, err := runRiverCLI(ctx, p.CLI, rs.URL(), w)
			if err != nil {
				return Result{}, err
			}
			rates["cli/"+w.Mode] = append(rates["cli/"+w.Mode], cli)
			if p.Emit != nil {
				p.Emit(Result{Scenario: "river-cli-" + w.Mode, Params: map[string]any{"rep": rep + 1, "cli": p.CLI},
					Metrics: map[string]float64{"jobs_per_s": cli}})
			}
			if err := rs.Reset(ctx); err != nil {
				return Result{}, err
			}
			r, err := rs.Bench(ctx, w, nil)
			if err != nil {
				return Result{}, err
			}
			r.Params["rep"] = rep + 1
			rates["harness/"+w.Mode] = append(rates["harness/"+w.Mode], r.Metrics["jobs_per_s"])
			if p.Emit != nil {
				p.Emit(r)
			}
		}
	}
	out := Result{
		Scenario: "rivercli",
		Params:   map[string]any{"cli": p.CLI, "duration": p.Duration.String(), "total": p.Total, "reps": max(p.Reps, 1)},
		Metrics:  map[string]float64{},
	}
	for _, w := range workloads {
		cli, harness := medianOf(rates["cli/"+w.Mode]), medianOf(rates["harness/"+w.Mode])
		out.Metrics["cli_"+w.Mode+"_jobs_per_s"] = cli
		out.Metrics["harness_"+w.Mode+"_jobs_per_s"] = harness
		out.Metrics["cli_ratio_"+w.Mode] = ratio(harness, cli)
		out.Params["cli_"+w.Mode+"_runs"] = roundAll(rates["cli/"+w.Mode])
		out.Params["harness_"+w.Mode+"_runs"] = roundAll(rates["harness/"+w.Mode])
	}
	return out, nil
}

// runRiverCLI runs `river bench` for w against databaseURL and returns the
// rate its summary line prints.
func runRiverCLI(ctx context.Context, cli, databaseURL string, w BenchWorkload) (float64, error) {
	args := []string{"bench", "--database-url", databaseURL}
	if w.Mode == WorkloadBacklog {
		args = append(args, "--num-total-jobs", strconv.Itoa(w.Total))
	} else {
		args = append(args, "--duration", w.Duration.String())
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("river CLI %v: %w\n%s", args, err, out.Bytes())
	}
	m := riverCLIRate.FindSubmatch(out.Bytes())
	if m == nil {
		return 0, fmt.Errorf("river CLI %v printed no summary line:\n%s", args, out.Bytes())
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func roundAll(vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = float64(int(v))
	}
	return out
}
