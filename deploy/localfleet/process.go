package localfleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// logTailBytes is how much of a process's recent output Logs keeps for
// test failure messages; the full output is in the log file.
const logTailBytes = 64 << 10

// Process is one started binary of the fleet. Its stdout and stderr go to
// LogPath and, the most recent part, to an in-memory tail for Logs.
type Process struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string

	logFile *os.File
	tail    *tailBuffer
	done    chan struct{} // closed when the process has exited and been reaped
	waitErr error         // set before done is closed
}

// Start runs bin as the process called name, with env added to this
// process's environment (later entries win) and its output captured in
// logDir/<name>.log. ctx only bounds the start: the process outlives it and
// is stopped with Signal, Kill and Wait.
//
// The child gets its own process group, so a Ctrl-C in a terminal reaches
// only the parent, which stops the fleet in order; and it is sent SIGTERM if
// the parent dies, so a crashed test leaves nothing running.
func Start(ctx context.Context, name, bin string, env []string, logDir string, args ...string) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, logFile: f, tail: &tailBuffer{max: logTailBytes}, done: make(chan struct{})}
	out := &teeWriter{file: f, tail: p.tail}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.Cmd = cmd
	go func() {
		p.waitErr = cmd.Wait()
		p.logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Signal sends sig to the process; a process that already exited is not an
// error.
func (p *Process) Signal(sig os.Signal) error {
	if err := p.Cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.Name, err)
	}
	return nil
}

// Kill sends SIGKILL.
func (p *Process) Kill() error { return p.Signal(syscall.SIGKILL) }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to timeout for the process to exit and returns how it ended:
// nil for exit status 0, the *exec.ExitError otherwise, or an error saying it
// is still running.
func (p *Process) Wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("%s exited: %w", p.Name, p.waitErr)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("%s still running after %s", p.Name, timeout)
	}
}

// Logs returns the most recent output of the process (stdout and stderr
// interleaved), for test failure messages.
func (p *Process) Logs() string { return p.tail.String() }

// teeWriter writes a process's output to its log file and its tail. exec
// calls it from one goroutine at a time because stdout and stderr share it.
type teeWriter struct {
	file *os.File
	tail *tailBuffer
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.tail.Write(b)
	return w.file.Write(b)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
