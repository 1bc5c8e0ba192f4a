// Package proctest runs a service's real binary in a test: it builds the
// command, starts it with a clean environment, reads its JSON log, waits on
// what it does (a log line, an HTTP answer, a condition) and stops it. Every
// wait is bounded by one Patience, a hang guard rather than a measurement,
// and polls; nothing sleeps to let time pass.
package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
)

// Patience bounds every wait of a process test: start-up, a log line, an
// answer, an exit. It is generous because a loaded machine is slow; a test
// that needs it has hung, and fails saying what it waited for.
const Patience = 60 * time.Second

// PollInterval is how often WaitFor asks again.
const PollInterval = 20 * time.Millisecond

// Build compiles the command in the package directory dir (relative to the
// test's working directory; "." for the test's own) into a temporary
// directory and returns the binary's path.
func Build(t testing.TB, dir, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*Patience)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, out)
	}
	return bin
}

// Env is the test's environment without any PULSE_ or OTEL_ variable of
// the machine's, with tracing off, plus env (later entries win).
func Env(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PULSE_") && !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return append(append(out, "OTEL_SDK_DISABLED=true"), env...)
}

// Result is how a process that ran to its end ended.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run runs bin with env (see Env) and args to its end, failing the test if
// it takes longer than Patience or cannot start.
func Run(t testing.TB, bin string, env []string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not exit within %s\nstderr: %s", filepath.Base(bin), args, Patience, stderr.String())
	}
	res := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.Code = exitErr.ExitCode()
	default:
		t.Fatalf("run %s: %v", bin, err)
	}
	return res
}

// Buffer collects a process's output while the test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Process is a binary started by Start.
type Process struct {
	Cmd            *exec.Cmd
	Stdout, Stderr *Buffer

	exited  chan struct{}
	waitErr error
}

// Start starts bin with env (see Env) and args. The test's cleanup kills
// it if it is still running.
func Start(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(bin, args...), Stdout: &Buffer{}, Stderr: &Buffer{}, exited: make(chan struct{})}
	p.Cmd.Env = env
	p.Cmd.Stdout, p.Cmd.Stderr = p.Stdout, p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { p.waitErr = p.Cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.Cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Logged waits for the JSON log line whose msg is msg, on stdout, and
// returns it decoded; it fails the test if the process exits first.
func (p *Process) Logged(t testing.TB, msg string) map[string]any {
	t.Helper()
	var rec map[string]any
	WaitFor(t, "the log line "+msg, func() bool {
		p.failIfExited(t, "before logging "+msg)
		for _, line := range strings.Split(p.Stdout.String(), "\n") {
			var r map[string]any
			if json.Unmarshal([]byte(line), &r) == nil && r["msg"] == msg {
				rec = r
				return true
			}
		}
		return false
	})
	return rec
}

// WaitHTTP waits until url answers want, failing the test if the process
// exits first.
func (p *Process) WaitHTTP(t testing.TB, url string, want int) {
	t.Helper()
	WaitFor(t, url+" to answer "+http.StatusText(want), func() bool {
		p.failIfExited(t, "while waiting for "+url)
		code, _ := Get(url)
		return code == want
	})
}

// Stop sends SIGTERM and waits for the process to exit, requiring exit
// status 0.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(Patience):
		t.Fatalf("%s did not stop within %s of SIGTERM\nstderr: %s", filepath.Base(p.Cmd.Path), Patience, p.Stderr)
	}
	if p.waitErr != nil {
		t.Fatalf("%s exited with %v after SIGTERM\nstderr: %s", filepath.Base(p.Cmd.Path), p.waitErr, p.Stderr)
	}
}

func (p *Process) failIfExited(t testing.TB, when string) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("%s exited %s (%v)\nstdout: %s\nstderr: %s", filepath.Base(p.Cmd.Path), when, p.waitErr, p.Stdout, p.Stderr)
	default:
	}
}

// WaitFor polls cond until it holds, failing the test, naming what, after
// Patience. cond runs on the test's goroutine, so it may fail the test.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Patience)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", Patience, what)
		}
		<-tick.C
	}
}

// Get fetches url and returns the status code (0 when it could not be
// reached) and the body.
func Get(url string) (int, string) {
	client := &http.Client{Timeout: Patience}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
