package localfleet

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// TestPulseDev runs the pulse-dev command the way a developer does, pushes
// one job through the real fleet, then stops it with Ctrl-C and checks that
// no process and no file is left behind.
func TestPulseDev(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs make dev's whole fleet with its Go, Python and TypeScript workers (about 50 s on two cores); make test-long runs it")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	root, err := FindRepoRoot(".")
	require.NoError(t, err)
	binDir := t.TempDir()

	_, err = Build(ctx, root, binDir, ControlAPI, DispatchGateway)
	require.NoError(t, err, "build the services")
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(binDir, "pulse-dev"), "./deploy/localfleet/cmd/pulse-dev")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build pulse-dev:\n%s", out)

	var stdout, stderr syncBuffer
	dev := exec.Command(filepath.Join(binDir, "pulse-dev"), "-gateways", "2", "-demo=true", "-status", "300ms")
	dev.Dir = root
	dev.Stdout, dev.Stderr = &stdout, &stderr
	require.NoError(t, dev.Start())
	exited, gone := make(chan error, 1), make(chan struct{})
	go func() { exited <- dev.Wait(); close(gone) }()
	t.Cleanup(func() {
		// Only matters when the test failed early: stop it as Ctrl-C does,
		// so that its Postgres and services go with it (a killed pulse-dev
		// leaves them running), and kill it only if it will not stop.
		select {
		case <-gone:
			return
		default:
		}
		_ = dev.Process.Signal(os.Interrupt)
		select {
		case <-gone:
		case <-time.After(time.Minute):
			_ = dev.Process.Kill()
		}
	})
	output := func() string { return "stdout:\n" + stdout.String() + "\nstderr:\n" + stderr.String() }

	// Wait for the summary; its last fleet line is "pids:".
	summary := ""
	for summary == "" {
		select {
		case err := <-exited:
			t.Fatalf("pulse-dev exited before the fleet was up: %v\n%s", err, output())
		case <-ctx.Done():
			t.Fatalf("pulse-dev did not come up: %v\n%s", ctx.Err(), output())
		case <-time.After(200 * time.Millisecond):
			if s := stdout.String(); strings.Contains(s, "  pids: ") {
				summary = s
			}
		}
	}
	controlHTTP := field(t, summary, "control-api http:")
	gateways := strings.Split(field(t, summary, "gateways grpc:"), ",")
	dataDirs := strings.Fields(field(t, summary, "data:"))
	pids := parsePIDs(t, field(t, summary, "pids:"))
	require.Len(t, gateways, 2)
	require.Contains(t, pids, "control-api")
	require.Contains(t, pids, "postgres")
	require.Contains(t, pids, "demo-worker")
	require.Contains(t, pids, DemoWorkerPython, "the Python SDK's demo runs beside the Go one")
	require.NotEmpty(t, dataDirs)
	for _, d := range dataDirs {
		require.DirExists(t, d)
	}

	readyCtx, readyCancel := context.WithTimeout(ctx, 30*time.Second)
	defer readyCancel()
	require.NoError(t, WaitHTTP(readyCtx, controlHTTP+"/readyz"), output())

	// A private topic and handler, so the outcome does not depend on the
	// demo worker's deliberate failures.
	handled := make(chan string, 1)
	// The fleet runs with the development users, which the summary prints.
	require.Contains(t, summary, DevWorkerUser+":"+DevWorkerPassword)
	require.Contains(t, summary, "curl -s -u "+DevOperatorUser+":"+DevOperatorPassword+" -X POST "+controlHTTP+"/v1/jobs")
	require.Contains(t, summary, "export PULSE_SERVER="+controlHTTP+" PULSE_USER="+DevOperatorUser+" PULSE_PASSWORD="+DevOperatorPassword)
	resp, err := http.Post(controlHTTP+"/v1/jobs", "application/json", strings.NewReader(`{"topic":"fleet.test"}`))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "credentials are required, even in development")

	worker, err := pulse.NewWorker(gateways, pulse.WithConcurrency(2),
		pulse.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		pulse.WithUserPass(DevWorkerUser, DevWorkerPassword))
	require.NoError(t, err)
	worker.Register("fleet.test", func(ctx context.Context, job *pulse.Job) error {
		select {
		case handled <- job.ID:
		default:
		}
		return nil
	})
	workerCtx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- worker.Run(workerCtx) }()

	id := submitJob(t, controlHTTP, `{"topic":"fleet.test","args":{"to":"a@example.com"}}`)
	var status string
	require.Eventually(t, func() bool {
		status = jobStatus(t, controlHTTP, id)
		return strings.HasSuffix(status, "COMPLETED")
	}, time.Minute, 100*time.Millisecond, "job %s never completed; last status %q\n%s", id, status, output())
	require.Equal(t, id, <-handled)
	require.Contains(t, summary, "export PULSE_SERVER="+controlHTTP, "the summary says how to point the CLI at the fleet")

	// The status line counts the completed job and the demo's work: two
	// or more done means the demo producer and worker authenticated with
	// the development users too (this test's worker runs only fleet.test).
	doneCount := regexp.MustCompile(`(?m)^status: \S+  done ([2-9]|[1-9][0-9]+) · failed attempts [0-9]+ · dead [0-9]+ · queued [0-9]+ · running [0-9]+$`)
	require.Eventually(t, func() bool { return doneCount.MatchString(stdout.String()) }, time.Minute, 100*time.Millisecond,
		"no status line counting a completed job\n%s", output())

	// The Python demo produced and completed jobs on its own topic.
	require.Eventually(t, func() bool { return completedOn(t, controlHTTP, PythonDemoTopic) }, time.Minute, 100*time.Millisecond,
		"no completed %s job: the Python demo did not produce and work\n%s", PythonDemoTopic, output())

	stopWorker()
	require.NoError(t, <-workerDone)

	require.NoError(t, dev.Process.Signal(syscall.SIGINT))
	select {
	case err := <-exited:
		require.NoError(t, err, "pulse-dev should exit 0 after Ctrl-C\n%s", output())
	case <-time.After(2 * time.Minute):
		t.Fatalf("pulse-dev did not exit after SIGINT\n%s", output())
	}
	require.Contains(t, stdout.String(), "nothing left behind")
	for name, pid := range pids {
		require.Eventually(t, func() bool { return !ProcessAlive(pid) }, 5*time.Second, 50*time.Millisecond,
			"%s (pid %d) still running after pulse-dev exited", name, pid)
	}
	for _, d := range dataDirs {
		require.NoDirExists(t, d)
	}
}

// field returns the value after label on its line of pulse-dev's summary.
func field(t *testing.T, summary, label string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(label) + `\s*(.+)$`).FindStringSubmatch(summary)
	require.NotNil(t, m, "no %q line in:\n%s", label, summary)
	return strings.TrimSpace(m[1])
}

func parsePIDs(t *testing.T, line string) map[string]int {
	t.Helper()
	pids := map[string]int{}
	for _, kv := range strings.Fields(line) {
		name, v, ok := strings.Cut(kv, "=")
		require.True(t, ok, "bad pids entry %q", kv)
		pid, err := strconv.Atoi(v)
		require.NoError(t, err)
		pids[name] = pid
	}
	return pids
}

func submitJob(t *testing.T, base, body string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/jobs", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(DevProducerUser, DevProducerPassword)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Less(t, resp.StatusCode, 300, "POST /v1/jobs: %s: %s", resp.Status, b)
	id := findString(decode(t, b), "id")
	require.NotEmpty(t, id, "no job id in %s", b)
	return id
}

func jobStatus(t *testing.T, base, id string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/v1/jobs/"+id, nil)
	require.NoError(t, err)
	req.SetBasicAuth(DevProducerUser, DevProducerPassword)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET /v1/jobs/%s: %s", id, b)
	status := findString(decode(t, b), "status")
	require.NotContains(t, []string{"DEAD_LETTERED", "CANCELED"}, strings.TrimPrefix(status, "JOB_STATUS_"), "job %s: %s", id, b)
	return status
}

// completedOn reports whether topic has a COMPLETED job.
func completedOn(t *testing.T, base, topic string) bool {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/v1/jobs?status=COMPLETED&limit=1&topic="+topic, nil)
	require.NoError(t, err)
	req.SetBasicAuth(DevProducerUser, DevProducerPassword)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET /v1/jobs: %s", b)
	var page struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal(b, &page), "not a job page: %s", b)
	return len(page.Jobs) > 0 && page.Jobs[0].ID != ""
}

func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(b, &v), "not JSON: %s", b)
	return v
}

// findString returns the first string under key, searching nested objects,
// so the test does not depend on whether the API wraps the job ({"job":{..}}).
func findString(v any, key string) string {
	obj, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if s, ok := obj[key].(string); ok {
		return s
	}
	for _, child := range obj {
		if s := findString(child, key); s != "" {
			return s
		}
	}
	return ""
}

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
