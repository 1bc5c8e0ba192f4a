package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
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

func buildScheduler(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "scheduler")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// schedulerEnv is the test's environment without the machine's PULSE_ and
// OTEL_ variables, plus env.
func schedulerEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PULSE_") && !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return append(append(out, "OTEL_SDK_DISABLED=true"), env...)
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

func statusOf(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestSchedulerProcess(t *testing.T) {
	t.Parallel()
	bin := buildScheduler(t, t.TempDir())

	t.Run("ServesReadyzAndExitsCleanlyOnSIGTERM", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(bin)
		cmd.Env = schedulerEnv("PULSE_DATABASE_URL="+pgtest.URL(t), "PULSE_ADMIN_ADDR=127.0.0.1:0")
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

		var addr string
		waitFor(t, "the scheduler to start", func() bool {
			select {
			case <-exited:
				t.Fatalf("scheduler exited early; stderr:\n%s", stderr)
			default:
			}
			for _, line := range strings.Split(stdout.String(), "\n") {
				var rec struct {
					Msg       string `json:"msg"`
					AdminAddr string `json:"admin_addr"`
					Version   string `json:"version"`
				}
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "scheduler running" {
					require.NotEmpty(t, rec.Version, "the start line names the build")
					require.NotEqual(t, "dev", rec.Version)
					addr = rec.AdminAddr
					return true
				}
			}
			return false
		})
		waitFor(t, "/readyz to answer 200", func() bool { return statusOf("http://"+addr+"/readyz") == http.StatusOK })
		require.Equal(t, http.StatusOK, statusOf("http://"+addr+"/healthz"))
		require.Equal(t, http.StatusOK, statusOf("http://"+addr+"/metrics"))
		require.Contains(t, stdout.String(), "schedule loop started")

		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-exited:
		case <-time.After(patience):
			t.Fatal("scheduler did not stop on SIGTERM")
		}
		require.NoError(t, waitErr, "stderr:\n%s", stderr)
		require.Equal(t, 0, cmd.ProcessState.ExitCode())
		require.Contains(t, stdout.String(), `"msg":"stopped cleanly"`)
	})

	t.Run("RefusesASchemaOlderThanItNeeds", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = schedulerEnv("PULSE_DATABASE_URL="+pgtest.EmptyURL(t), "PULSE_ADMIN_ADDR=127.0.0.1:0")
		out, err := cmd.CombinedOutput()
		require.NoError(t, ctx.Err(), "scheduler did not exit")
		require.Error(t, err)
		require.Contains(t, string(out), "needs version 1 or newer")
	})
}
