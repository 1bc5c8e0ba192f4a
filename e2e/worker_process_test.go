package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
)

// chaosEnv is the fleet configuration of the recovery tests: leases lapse
// in seconds, the reaper sweeps five times a second and retries wait
// milliseconds, so a lost attempt is recovered quickly. Every wait in the
// tests is still a liveness bound, never a claim about speed.
func chaosEnv(extra map[string]string) map[string]string {
	env := map[string]string{
		"PULSE_LEASE_TTL":          "2s",
		"PULSE_HEARTBEAT_INTERVAL": "500ms",
		"PULSE_SWEEP_INTERVAL":     "200ms",
		"PULSE_RETRY_BACKOFF_UNIT": "10ms",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// recoveryTimeout bounds every wait for a recovery: far above the lease TTL
// plus a sweep tick, so a slow machine does not make it flaky.
const recoveryTimeout = 60 * time.Second

// binDir holds the binaries the recovery tests run, built once per test
// run by binaries and removed by TestMain.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pulse-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// builtBinaries are the services and cmd/e2e-worker (under the name
// e2eWorker), compiled on first use and shared by every recovery fleet: one
// build instead of one per fleet keeps the suite fast on a small machine.
var builtBinaries = sync.OnceValues(func() (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := localfleet.FindRepoRoot(".")
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var workerErr error
	wg.Go(func() {
		out, err := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(binDir, e2eWorker), "./cmd/e2e-worker").CombinedOutput()
		if err != nil {
			workerErr = fmt.Errorf("build e2e-worker: %w\n%s", err, out)
		}
	})
	bins, err := localfleet.Build(ctx, root, binDir, localfleet.ControlAPI, localfleet.DispatchGateway, localfleet.Reaper)
	wg.Wait()
	if err := errors.Join(err, workerErr); err != nil {
		return nil, err
	}
	bins[e2eWorker] = filepath.Join(binDir, e2eWorker)
	return bins, nil
})

// e2eWorker names cmd/e2e-worker among builtBinaries.
const e2eWorker = "e2e-worker"

func binaries(t *testing.T) map[string]string {
	t.Helper()
	bins, err := builtBinaries()
	require.NoError(t, err)
	return bins
}

// upChaosFleet starts a fleet for a recovery test: the shared binaries and
// chaosEnv plus extra.
func upChaosFleet(t *testing.T, opts localfleet.Options, extra map[string]string) *localfleet.Fleet {
	t.Helper()
	opts.Binaries = binaries(t)
	opts.Env = chaosEnv(extra)
	return upFleet(t, opts)
}

// workerSpec is what one e2e-worker process runs; see cmd/e2e-worker.
type workerSpec struct {
	ID          string
	Topic       string
	Gateways    []string
	Concurrency int
	// Hold blocks every handler until this file exists; release it with
	// releaseHold.
	Hold string
	// HonorCancel makes a held handler return when its context is canceled.
	HonorCancel bool
	// Work is how long every handler takes.
	Work time.Duration
}

// workerProcess is one running e2e-worker.
type workerProcess struct {
	*localfleet.Process
	ID     string
	record string
}

// startWorker runs an e2e-worker against f. It is killed when the test
// ends (a worker holding a never-released job would otherwise wait out its
// shutdown timeout), with its log shown if the test failed.
func startWorker(t *testing.T, f *localfleet.Fleet, spec workerSpec) *workerProcess {
	t.Helper()
	bin := binaries(t)[e2eWorker]
	if spec.Concurrency == 0 {
		spec.Concurrency = 1
	}
	record := filepath.Join(t.TempDir(), spec.ID+".jsonl")
	args := []string{
		"-id", spec.ID, "-topic", spec.Topic, "-gateways", strings.Join(spec.Gateways, ","),
		"-concurrency", strconv.Itoa(spec.Concurrency), "-record", record,
	}
	if spec.Hold != "" {
		args = append(args, "-hold", spec.Hold)
	}
	if spec.HonorCancel {
		args = append(args, "-honor-cancel")
	}
	if spec.Work > 0 {
		args = append(args, "-work", spec.Work.String())
	}
	p, err := localfleet.Start(t.Context(), spec.ID, bin, nil, f.LogDir, args...)
	require.NoError(t, err)
	w := &workerProcess{Process: p, ID: spec.ID, record: record}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- worker %s log tail ---\n%s", w.ID, lastLines(w.Logs(), 40))
		}
		_ = w.Signal(syscall.SIGCONT) // a stopped process dies of SIGKILL too, but be plain about it
		_ = w.Kill()
		_ = w.Wait(10 * time.Second)
	})
	return w
}

// killHard sends SIGKILL and waits for the process to be gone.
func (w *workerProcess) killHard(t *testing.T) {
	t.Helper()
	require.NoError(t, w.Kill())
	require.Error(t, w.Wait(10*time.Second), "a SIGKILLed worker cannot exit cleanly")
}

// workerEvent is one line of a worker's record file (cmd/e2e-worker Record).
type workerEvent struct {
	Event   string    `json:"event"`
	Job     string    `json:"job"`
	Attempt int       `json:"attempt"`
	Worker  string    `json:"worker"`
	At      time.Time `json:"at"`
	Cause   string    `json:"cause"`
	Err     string    `json:"err"`
}

// events reads the worker's record file; a line cut short by kill -9 is
// skipped. It is safe inside require.Eventually conditions: a file that
// cannot be read (yet) has no events.
func (w *workerProcess) events(t *testing.T) []workerEvent {
	t.Helper()
	b, err := os.ReadFile(w.record)
	if err != nil {
		return nil
	}
	var out []workerEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var e workerEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// event returns the worker's first event of kind for job attempt.
func (w *workerProcess) event(t *testing.T, kind, job string, attempt int) (workerEvent, bool) {
	t.Helper()
	for _, e := range w.events(t) {
		if e.Event == kind && e.Job == job && e.Attempt == attempt {
			return e, true
		}
	}
	return workerEvent{}, false
}

// logged reports whether the worker (the SDK included) logged msg about
// job attempt; it returns that line's attributes.
func (w *workerProcess) logged(msg, job string, attempt int) (map[string]any, bool) {
	b, err := os.ReadFile(w.LogPath)
	if err != nil {
		return nil, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if line["msg"] == msg && line["job_id"] == job && line["attempt"] == float64(attempt) {
			return line, true
		}
	}
	return nil, false
}

// releaseHold creates the file held handlers wait for.
func releaseHold(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, nil, 0o644))
}

// attemptError is one entry of a job's error history.
type attemptError struct {
	Attempt int    `json:"attempt"`
	Error   string `json:"error"`
	Worker  string `json:"worker"`
}

// jobRow is what the recovery tests check on a job, read straight from the
// jobs table.
type jobRow struct {
	Status   string
	Attempts int
	LockedBy string
	Errors   []attemptError
}

func readJob(ctx context.Context, pool *pgxpool.Pool, id string) (jobRow, error) {
	var r jobRow
	var lockedBy *string
	var errs []byte
	err := pool.QueryRow(ctx, `SELECT status, attempts, locked_by, errors FROM jobs WHERE id = $1`, id).
		Scan(&r.Status, &r.Attempts, &lockedBy, &errs)
	if err != nil {
		return r, fmt.Errorf("read job %s: %w", id, err)
	}
	if lockedBy != nil {
		r.LockedBy = *lockedBy
	}
	if err := json.Unmarshal(errs, &r.Errors); err != nil {
		return r, fmt.Errorf("read job %s errors: %w", id, err)
	}
	return r, nil
}

func mustReadJob(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id string) jobRow {
	t.Helper()
	r, err := readJob(ctx, pool, id)
	require.NoError(t, err)
	return r
}

// httpJob is the part of GET /v1/jobs/{id} the recovery tests look at.
type httpJob struct {
	ID       string         `json:"id"`
	Status   string         `json:"status"`
	Attempts int            `json:"attempts"`
	LockedBy string         `json:"locked_by"`
	Errors   []attemptError `json:"errors"`
}

func getJobHTTP(ctx context.Context, f *localfleet.Fleet, id string) (httpJob, error) {
	var j httpJob
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.ControlHTTP+"/v1/jobs/"+id, nil)
	if err != nil {
		return j, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return j, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return j, err
	}
	if resp.StatusCode != http.StatusOK {
		return j, fmt.Errorf("GET /v1/jobs/%s: %d %s", id, resp.StatusCode, b)
	}
	return j, json.Unmarshal(b, &j)
}

// scrapeSum adds up every sample of the metric name at a service's
// /metrics whose labels contain labelPart ("" matches all).
func scrapeSum(ctx context.Context, adminURL, name, labelPart string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: %d", adminURL, resp.StatusCode)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		metric, labels, _ := strings.Cut(series, "{")
		if metric != name || !strings.Contains(labels, labelPart) {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", series, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

func mustScrapeSum(t *testing.T, ctx context.Context, adminURL, name, labelPart string) float64 {
	t.Helper()
	v, err := scrapeSum(ctx, adminURL, name, labelPart)
	require.NoError(t, err)
	return v
}

// forgetProcess takes a process the test killed on purpose out of the
// fleet, so Down does not report its death as a failed shutdown.
func forgetProcess(f *localfleet.Fleet, p *localfleet.Process) {
	for i, q := range f.Processes {
		if q == p {
			f.Processes = append(f.Processes[:i:i], f.Processes[i+1:]...)
			return
		}
	}
}

// fleetProcess returns the fleet's process called name.
func fleetProcess(t *testing.T, f *localfleet.Fleet, name string) *localfleet.Process {
	t.Helper()
	for _, p := range f.Processes {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("fleet has no process %q", name)
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
