package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// SDKWorkers are the SDKs the sdk-workers scenario knows, in run order.
var SDKWorkers = []string{"go", "typescript", "python"}

// SDKWorkerParams shape the sdk-workers run.
type SDKWorkerParams struct {
	// RepoRoot is the repository, where each SDK's conformance driver lives.
	RepoRoot string
	// SDKs to measure, a subset of SDKWorkers.
	SDKs []string
	// Jobs is the backlog each worker works off; Concurrency its slots.
	Jobs        int
	Concurrency int
	// Reps is how many rounds run, the SDKs interleaved in each.
	Reps int
	// Emit receives each round's result as it is measured.
	Emit func(Result)
}

// sdkBatch is how many jobs one SubmitJobs call of the backlog carries.
const sdkBatch = 1000

// SDKWorkerThroughput measures one worker process of each SDK on the same
// fleet: per round and SDK, a backlog of Jobs no-op jobs ({"op":"complete"})
// on a topic of its own, then the SDK's conformance driver
// (docs/sdk-conformance.md) started as the only worker on it with
// Concurrency slots. Its throughput is the jobs over the span from the
// first start to the last finish the database recorded, so the process's
// start-up is not counted. Each driver prints two event lines per job, to
// /dev/null here, the same work in every SDK. The summary has each SDK's
// median and its ratio to Go's.
func SDKWorkerThroughput(ctx context.Context, t Target, p SDKWorkerParams) (Result, error) {
	res := Result{Scenario: "sdk-workers", Params: map[string]any{"jobs": p.Jobs, "concurrency": p.Concurrency, "reps": p.Reps, "sdks": strings.Join(p.SDKs, ",")},
		Metrics: map[string]float64{}}
	commands := map[string][]string{}
	for _, sdk := range p.SDKs {
		cmd, err := prepareDriver(ctx, p.RepoRoot, sdk)
		if err != nil {
			return res, fmt.Errorf("prepare the %s driver: %w", sdk, err)
		}
		commands[sdk] = cmd
	}
	client, err := pulse.NewClient(t.ControlGRPC)
	if err != nil {
		return res, err
	}
	defer client.Close()
	pool, err := pgxpool.New(ctx, t.DatabaseURL)
	if err != nil {
		return res, err
	}
	defer pool.Close()

	rates := map[string][]float64{}
	for rep := 1; rep <= p.Reps; rep++ {
		for _, sdk := range p.SDKs {
			topic := fmt.Sprintf("load.sdk.%s.%d.%d", sdk, time.Now().UnixNano(), rep)
			rate, err := sdkRound(ctx, t, client, pool, commands[sdk], topic, p)
			if err != nil {
				return res, fmt.Errorf("%s round %d: %w", sdk, rep, err)
			}
			rates[sdk] = append(rates[sdk], rate)
			if p.Emit != nil {
				p.Emit(Result{Scenario: "sdk-workers-round", Params: map[string]any{"sdk": sdk, "round": rep, "jobs": p.Jobs, "concurrency": p.Concurrency},
					Metrics: map[string]float64{"jobs_per_s": rate}})
			}
		}
	}
	for sdk, rs := range rates {
		res.Metrics["jobs_per_s_"+sdk] = medianOf(rs)
	}
	if goRate := res.Metrics["jobs_per_s_go"]; goRate > 0 {
		for _, sdk := range p.SDKs {
			if sdk != "go" {
				res.Metrics["ratio_to_go_"+sdk] = res.Metrics["jobs_per_s_"+sdk] / goRate
			}
		}
	}
	return res, nil
}

// sdkRound works off one backlog with one driver and returns jobs/s.
func sdkRound(ctx context.Context, t Target, client *pulse.Client, pool *pgxpool.Pool, command []string, topic string, p SDKWorkerParams) (float64, error) {
	for sent := 0; sent < p.Jobs; sent += sdkBatch {
		n := min(sdkBatch, p.Jobs-sent)
		reqs := make([]pulse.JobRequest, n)
		for i := range reqs {
			reqs[i] = pulse.JobRequest{Topic: topic, Args: []byte(`{"op":"complete"}`)}
		}
		if _, err := client.EnqueueMany(ctx, reqs); err != nil {
			return 0, fmt.Errorf("enqueue the backlog: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, command[0], command[1:]...)
	cmd.Env = append(os.Environ(),
		"PULSE_GATEWAY_ADDRS="+strings.Join(t.GatewayAddrs, ","),
		"PULSE_TOPICS="+topic,
		"PULSE_WORKER_ID="+topic,
		"PULSE_CONCURRENCY="+strconv.Itoa(p.Concurrency),
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = $1 AND status = 'COMPLETED'`, topic).Scan(&done); err != nil {
			stop()
			return 0, err
		}
		if done >= p.Jobs {
			break
		}
		select {
		case <-exited:
			return 0, fmt.Errorf("the driver exited with %d of %d jobs done: %w\n%s", done, p.Jobs, waitErr, lastLines(stderr.String(), 20))
		case <-ctx.Done():
			stop()
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
	stop()
	var secs float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM jobs WHERE topic = $1`, topic).Scan(&secs); err != nil {
		return 0, err
	}
	if secs <= 0 {
		return 0, errors.New("no span between the first start and the last finish")
	}
	return float64(p.Jobs) / secs, nil
}

// prepareDriver builds what an SDK's conformance driver needs and returns
// the command that runs it; a missing tool is an error naming it.
func prepareDriver(ctx context.Context, root, sdk string) ([]string, error) {
	run := func(dir, name string, args ...string) ([]byte, error) {
		c := exec.CommandContext(ctx, name, args...)
		c.Dir = dir
		var stderr bytes.Buffer
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
		}
		return out, nil
	}
	switch sdk {
	case "go":
		dir, err := os.MkdirTemp("", "pulse-load-godriver-")
		if err != nil {
			return nil, err
		}
		bin := filepath.Join(dir, "godriver")
		if _, err := run(root, "go", "build", "-o", bin, "./e2e/conformance/godriver"); err != nil {
			return nil, err
		}
		return []string{bin}, nil
	case "typescript":
		node, err := exec.LookPath("node")
		if err != nil {
			return nil, errors.New("node is not on PATH (the TypeScript SDK needs Node 20 or later)")
		}
		dir := filepath.Join(root, "sdk", "typescript")
		if _, err := run(dir, "npm", "ci", "--no-audit", "--no-fund"); err != nil { // installs and builds (prepare)
			return nil, err
		}
		return []string{node, filepath.Join(dir, "dist", "conformance", "driver.js")}, nil
	case "python":
		out, err := run(root, filepath.Join(root, "sdk", "python", "scripts", "ensure-deps.sh"))
		if err != nil {
			return nil, err
		}
		return []string{strings.TrimSpace(string(out)), filepath.Join(root, "sdk", "python", "conformance", "driver.py")}, nil
	default:
		return nil, fmt.Errorf("unknown SDK %q; known: %s", sdk, strings.Join(SDKWorkers, ", "))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
