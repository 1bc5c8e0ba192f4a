package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/reaper/internal/fixture"
)

// patience bounds every wait on the process; it is a hang guard, not a
// performance assertion.
const patience = 60 * time.Second

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// buildReaper compiles this command into dir.
func buildReaper(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "reaper")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// reaperEnv is the test's environment without any PULSE_ variable of the
// machine's, plus env.
func reaperEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PULSE_") && !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return append(append(out, "OTEL_SDK_DISABLED=true"), env...)
}

// runToExit runs bin to completion and returns its exit code and stderr.
func runToExit(t *testing.T, bin string, env ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = reaperEnv(env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "process did not exit")
	if err == nil {
		return 0, stderr.String()
	}
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr)
	return exitErr.ExitCode(), stderr.String()
}

// waitFor polls cond on the test's goroutine until it holds, failing the
// test after patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// adminAddr waits for the "reaper running" log line and returns the admin
// address it names (the process picked a free port).
func adminAddr(t *testing.T, stdout *lockedBuffer, exited <-chan struct{}) string {
	t.Helper()
	var addr string
	waitFor(t, "the reaper to start", func() bool {
		select {
		case <-exited:
			t.Fatalf("reaper exited early; output:\n%s", stdout)
		default:
		}
		for _, line := range strings.Split(stdout.String(), "\n") {
			var rec struct {
				Msg       string `json:"msg"`
				AdminAddr string `json:"admin_addr"`
				Version   string `json:"version"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "reaper running" {
				require.NotEmpty(t, rec.Version, "the start line names the build")
				require.NotEqual(t, "dev", rec.Version)
				addr = rec.AdminAddr
				return true
			}
		}
		return false
	})
	return addr
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestReaperProcess(t *testing.T) {
	t.Parallel()
	bin := buildReaper(t, t.TempDir())

	t.Run("ServesReapsAndExitsCleanlyOnSIGTERM", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		pool, err := pgxpool.New(context.Background(), url)
		require.NoError(t, err)
		defer pool.Close()

		cmd := exec.Command(bin)
		// PULSE_RETRY_BACKOFF_UNIT writes the fleet's retry policy (the
		// retry_policy row) at start, and the sweep follows the row.
		cmd.Env = reaperEnv("PULSE_DATABASE_URL="+url, "PULSE_SWEEP_INTERVAL=100ms", "PULSE_ADMIN_ADDR=127.0.0.1:0",
			"PULSE_RETRY_BACKOFF_UNIT=3m")
		stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(exited) }()
		defer func() {
			select {
			case <-exited:
			default:
				_ = cmd.Process.Kill()
				<-exited
			}
		}()

		base := "http://" + adminAddr(t, stdout, exited)
		waitFor(t, "/readyz to answer 200", func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK })
		code, _ := get(t, base+"/healthz")
		require.Equal(t, http.StatusOK, code)

		id := fixture.Running(t, pool, fixture.RunningOpts{Topic: "proc.test", Worker: "worker-gone", LeaseIn: -time.Second})
		waitFor(t, "the expired job to be reaped", func() bool {
			return fixture.Job(t, pool, id).Status == pulsetype.StatusRetrying
		})
		j := fixture.Job(t, pool, id)
		require.Len(t, j.Errors, 1)
		require.Equal(t, "worker-gone", j.Errors[0].Worker)
		require.WithinDuration(t, time.Now().Add(3*time.Minute), j.NextRunAt, time.Minute, "1² × the unit the reaper set")
		require.Contains(t, stdout.String(), "retry policy set from the environment")

		_, body := get(t, base+"/metrics")
		require.Contains(t, body, `pulse_jobs_reaped_total{outcome="retried",topic="proc.test"} 1`)
		require.Contains(t, body, `pulse_reaper_sweep_duration_seconds_count`)
		require.Contains(t, body, `pulse_jobs_deleted_total{status="completed"}`)
		require.Contains(t, stdout.String(), `"worker_id":"worker-gone"`)

		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-exited:
		case <-time.After(patience):
			t.Fatal("reaper did not stop on SIGTERM")
		}
		require.NoError(t, waitErr, "stderr:\n%s", stderr)
		require.Equal(t, 0, cmd.ProcessState.ExitCode())
		require.Contains(t, stdout.String(), `"msg":"stopped cleanly"`)
	})

	t.Run("RefusesASchemaOlderThanItNeeds", func(t *testing.T) {
		t.Parallel()
		code, stderr := runToExit(t, bin, "PULSE_DATABASE_URL="+pgtest.EmptyURL(t), "PULSE_ADMIN_ADDR=127.0.0.1:0")
		require.NotEqual(t, 0, code)
		require.Contains(t, stderr, "needs version 1 or newer")
	})

	t.Run("RefusesABadSweepIntervalNamingTheVariable", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"often", "-5s", "1ms"} {
			code, stderr := runToExit(t, bin, "PULSE_DATABASE_URL=postgres://127.0.0.1:1/none", "PULSE_SWEEP_INTERVAL="+v)
			require.NotEqual(t, 0, code, "PULSE_SWEEP_INTERVAL=%s", v)
			require.Contains(t, stderr, "PULSE_SWEEP_INTERVAL", "PULSE_SWEEP_INTERVAL=%s", v)
		}
	})

	t.Run("ListsItsVariablesOnHelp", func(t *testing.T) {
		t.Parallel()
		out, err := exec.Command(bin, "-h").Output()
		require.NoError(t, err)
		for _, v := range []string{"PULSE_DATABASE_URL", "PULSE_SWEEP_INTERVAL", "PULSE_RETENTION_DEAD_LETTERED", "PULSE_RETRY_BACKOFF_UNIT"} {
			require.Contains(t, string(out), v)
		}
	})
}
