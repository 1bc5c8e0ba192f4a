package conformance_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// event is one line a driver prints on stdout (docs/sdk-conformance.md).
type event struct {
	Event    string `json:"event"`
	SDK      string `json:"sdk"`
	WorkerID string `json:"worker_id"`
	Job      string `json:"job"`
	Attempt  int    `json:"attempt"`
	Topic    string `json:"topic"`
	Result   string `json:"result"`
	Error    string `json:"error"`
	Reason   string `json:"reason"`
	Detail   string `json:"detail"`
	N        int    `json:"n"`
}

// driverSpec is what one driver process is told through its environment.
type driverSpec struct {
	WorkerID    string
	Topics      []string
	Gateways    []string
	Concurrency int
	// ShutdownTimeout is the drain budget after SIGTERM; zero leaves the
	// driver's default.
	ShutdownTimeout time.Duration
}

// driver is one running conformance driver.
type driver struct {
	name string
	cmd  *exec.Cmd

	mu     sync.Mutex
	events []event
	bad    []string // stdout lines that are not events
	stderr proctest.Buffer

	exited  chan struct{}
	waitErr error
}

// startDriver runs the SDK's driver command with spec in its environment
// and reads its events; it is killed when the test ends.
func startDriver(t *testing.T, command []string, spec driverSpec) *driver {
	t.Helper()
	env := []string{
		"PULSE_GATEWAY_ADDRS=" + strings.Join(spec.Gateways, ","),
		"PULSE_TOPICS=" + strings.Join(spec.Topics, ","),
		"PULSE_WORKER_ID=" + spec.WorkerID,
		"PULSE_CONCURRENCY=" + strconv.Itoa(max(spec.Concurrency, 1)),
		// The fleet runs with the development users: the driver is a worker.
		"PULSE_USER=" + localfleet.DevWorkerUser,
		"PULSE_PASSWORD=" + localfleet.DevWorkerPassword,
	}
	if spec.ShutdownTimeout > 0 {
		env = append(env, "PULSE_SHUTDOWN_TIMEOUT_MS="+strconv.FormatInt(spec.ShutdownTimeout.Milliseconds(), 10))
	}
	d := &driver{name: spec.WorkerID, exited: make(chan struct{})}
	d.cmd = exec.Command(command[0], command[1:]...)
	d.cmd.Env = proctest.Env(env...)
	d.cmd.Stderr = &d.stderr
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("driver %s: %v", d.name, err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start driver %s (%s): %v", d.name, strings.Join(command, " "), err)
	}
	go d.read(stdout)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- driver %s stderr ---\n%s\n--- events ---\n%s", d.name, lastLines(d.stderr.String(), 60), d.dump())
		}
		_ = d.cmd.Process.Signal(syscall.SIGCONT)
		_ = d.cmd.Process.Kill()
		<-d.exited
	})
	d.waitEvent(t, "the driver's ready line", func(e event) bool { return e.Event == "ready" })
	return d
}

func (d *driver) read(stdout interface{ Read([]byte) (int, error) }) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		line := sc.Text()
		d.mu.Lock()
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Event == "" {
			d.bad = append(d.bad, line)
		} else {
			d.events = append(d.events, e)
		}
		d.mu.Unlock()
	}
	d.waitErr = d.cmd.Wait()
	close(d.exited)
}

// snapshot is every event so far.
func (d *driver) snapshot() []event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]event(nil), d.events...)
}

// badLines are stdout lines that were not events.
func (d *driver) badLines() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.bad...)
}

func (d *driver) dump() string {
	var b strings.Builder
	for _, e := range d.snapshot() {
		j, err := json.Marshal(e)
		if err != nil {
			panic(err) // event is plain strings and ints
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return lastLines(b.String(), 80)
}

// hasExited reports whether the driver process has ended.
func (d *driver) hasExited() bool {
	select {
	case <-d.exited:
		return true
	default:
		return false
	}
}

// find returns the events matching match.
func (d *driver) find(match func(event) bool) []event {
	var out []event
	for _, e := range d.snapshot() {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits for an event matching match and returns the first one;
// the driver exiting first fails the test.
func (d *driver) waitEvent(t *testing.T, what string, match func(event) bool) event {
	t.Helper()
	var got event
	proctest.WaitFor(t, fmt.Sprintf("%s from driver %s", what, d.name), func() bool {
		if es := d.find(match); len(es) > 0 {
			got = es[0]
			return true
		}
		if d.hasExited() {
			t.Fatalf("driver %s exited (%v) while waiting for %s\nstderr: %s", d.name, d.waitErr, what, lastLines(d.stderr.String(), 40))
		}
		return false
	})
	return got
}

// signal sends sig to the driver process.
func (d *driver) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to driver %s: %v", sig, d.name, err)
	}
}

// waitExit waits for the driver to exit and returns its error (nil for
// exit status 0).
func (d *driver) waitExit(t *testing.T) error {
	t.Helper()
	select {
	case <-d.exited:
		return d.waitErr
	case <-time.After(proctest.Patience):
		t.Fatalf("driver %s did not exit within %s", d.name, proctest.Patience)
		return nil
	}
}

func jobEvent(kind, job string, attempt int) func(event) bool {
	return func(e event) bool { return e.Event == kind && e.Job == job && e.Attempt == attempt }
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
