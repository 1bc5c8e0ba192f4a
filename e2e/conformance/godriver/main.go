// Command godriver is the Go SDK's conformance driver: a pulse worker whose
// handler does what each job's args say and prints what happened as JSON
// lines on stdout, so the conformance suite (e2e/conformance) can hold the
// Go SDK to the same contracts as every other SDK. The contract — its
// environment variables, job ops and event lines — is docs/sdk-conformance.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// Environment variables of the driver contract.
const (
	envGateways        = "PULSE_GATEWAY_ADDRS"
	envTopics          = "PULSE_TOPICS"
	envWorkerID        = "PULSE_WORKER_ID"
	envConcurrency     = "PULSE_CONCURRENCY"
	envShutdownTimeout = "PULSE_SHUTDOWN_TIMEOUT_MS"
	envUser            = "PULSE_USER"
	envPassword        = "PULSE_PASSWORD"
)

// Defaults of the optional variables.
const (
	concurrencyDefault     = 1
	shutdownTimeoutDefault = 10 * time.Second
)

// config is the driver's environment, validated.
type config struct {
	gateways        []string
	topics          []string
	workerID        string
	concurrency     int
	shutdownTimeout time.Duration
	user, password  string
}

func main() {
	cfg, err := loadConfig(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "godriver:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("worker_id", cfg.workerID)
	if err := run(cfg, logger, &emitter{}); err != nil {
		logger.Error("godriver failed", "error", err)
		os.Exit(1)
	}
}

func loadConfig(getenv func(string) string) (config, error) {
	c := config{concurrency: concurrencyDefault, shutdownTimeout: shutdownTimeoutDefault,
		workerID: getenv(envWorkerID), user: getenv(envUser), password: getenv(envPassword)}
	c.gateways = splitList(getenv(envGateways))
	c.topics = splitList(getenv(envTopics))
	switch {
	case len(c.gateways) == 0:
		return c, fmt.Errorf("%s is required (comma-separated gateway addresses)", envGateways)
	case len(c.topics) == 0:
		return c, fmt.Errorf("%s is required (comma-separated topics)", envTopics)
	case c.workerID == "":
		return c, fmt.Errorf("%s is required", envWorkerID)
	}
	if v := getenv(envConcurrency); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return c, fmt.Errorf("%s must be a positive integer, got %q", envConcurrency, v)
		}
		c.concurrency = n
	}
	if v := getenv(envShutdownTimeout); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return c, fmt.Errorf("%s must be a non-negative integer of milliseconds, got %q", envShutdownTimeout, v)
		}
		c.shutdownTimeout = time.Duration(n) * time.Millisecond
	}
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func run(cfg config, logger *slog.Logger, out *emitter) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := []pulse.WorkerOption{pulse.WithWorkerID(cfg.workerID), pulse.WithConcurrency(cfg.concurrency),
		pulse.WithLogger(logger), pulse.WithShutdownTimeout(cfg.shutdownTimeout)}
	if cfg.user != "" {
		opts = append(opts, pulse.WithUserPass(cfg.user, cfg.password))
	}
	w, err := pulse.NewWorker(cfg.gateways, opts...)
	if err != nil {
		return err
	}
	for _, topic := range cfg.topics {
		w.Register(topic, func(ctx context.Context, job *pulse.Job) error {
			return handle(ctx, job, out)
		})
	}
	out.emit(event{Event: "ready", SDK: "go", WorkerID: cfg.workerID})
	err = w.Run(ctx)
	out.emit(event{Event: "stopped"})
	return err
}

// args are a job's arguments: the op and its parameters.
type args struct {
	Op           string `json:"op"`
	MS           int    `json:"ms"`
	Steps        int    `json:"steps"`
	Bytes        int    `json:"bytes"`
	Message      string `json:"message"`
	UntilAttempt int    `json:"until_attempt"`
}

// handle runs one attempt as its args say, printing started and finished
// around it.
func handle(ctx context.Context, job *pulse.Job, out *emitter) error {
	out.emit(event{Event: "started", Job: job.ID, Attempt: job.Attempt, Topic: job.Topic})
	err := do(ctx, job, out)
	fin := event{Event: "finished", Job: job.ID, Attempt: job.Attempt, Result: "complete"}
	if err != nil {
		fin.Result, fin.Error = "fail", err.Error()
		if pulse.IsPermanent(err) {
			fin.Result = "fail_permanent"
		} else if _, ok := pulse.RetryAfterOf(err); ok {
			fin.Result = "retry_after"
		}
	}
	out.emit(fin)
	return err
}

func do(ctx context.Context, job *pulse.Job, out *emitter) error {
	var a args
	if err := job.UnmarshalArgs(&a); err != nil {
		return pulse.Permanent(fmt.Errorf("bad args: %w", err))
	}
	message := a.Message
	if message == "" {
		message = "failed as asked"
	}
	switch a.Op {
	case "complete":
		return nil
	case "sleep":
		return sleep(ctx, job, out, time.Duration(a.MS)*time.Millisecond)
	case "fail":
		if a.UntilAttempt > 0 && job.Attempt >= a.UntilAttempt {
			return nil
		}
		return errors.New(message)
	case "fail_permanent":
		return pulse.Permanent(errors.New(message))
	case "retry_after":
		if job.Attempt > 1 {
			return nil
		}
		return pulse.RetryAfter(time.Duration(a.MS)*time.Millisecond, errors.New(message))
	case "wait_cancel":
		<-ctx.Done()
		return aborted(ctx, job, out)
	case "checkpoint":
		for i := 1; i <= a.Steps; i++ {
			if err := sleep(ctx, job, out, time.Duration(a.MS)*time.Millisecond); err != nil {
				return err
			}
			if err := pulse.SafePoint(ctx); err != nil {
				return aborted(ctx, job, out)
			}
			out.emit(event{Event: "checkpoint", Job: job.ID, Attempt: job.Attempt, N: i})
		}
		return nil
	case "hang_past_lease":
		if job.Attempt > 1 {
			return pulse.Permanent(errors.New("second attempt"))
		}
		<-ctx.Done()
		_ = aborted(ctx, job, out)
		return nil // a success the gateway must refuse: the lease is gone
	case "huge_error":
		return pulse.Permanent(errors.New(strings.Repeat("x", a.Bytes)))
	case "bad_utf8_error":
		return pulse.Permanent(errors.New("bad-utf8:\xff\xfe\xc3:end"))
	case "nul_error":
		return pulse.Permanent(errors.New("nul:\x00:end"))
	default:
		return pulse.Permanent(fmt.Errorf("unknown op %q", a.Op))
	}
}

// sleep waits d, or until the attempt is stopped.
func sleep(ctx context.Context, job *pulse.Job, out *emitter, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return aborted(ctx, job, out)
	}
}

// aborted prints why the attempt was stopped and returns its error.
func aborted(ctx context.Context, job *pulse.Job, out *emitter) error {
	cause := context.Cause(ctx)
	out.emit(event{Event: "aborted", Job: job.ID, Attempt: job.Attempt, Reason: reason(cause), Detail: cause.Error()})
	return cause
}

// reason names why a handler's context was canceled, in the contract's words.
func reason(cause error) string {
	switch {
	case errors.Is(cause, pulse.ErrJobCanceled):
		return "canceled"
	case errors.Is(cause, pulse.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(cause, pulse.ErrJobTimedOut):
		return "timeout"
	case errors.Is(cause, pulse.ErrWorkerShutdown):
		return "shutdown"
	default:
		return "unknown"
	}
}

// event is one line on stdout.
type event struct {
	Event    string `json:"event"`
	SDK      string `json:"sdk,omitempty"`
	WorkerID string `json:"worker_id,omitempty"`
	Job      string `json:"job,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	Topic    string `json:"topic,omitempty"`
	Result   string `json:"result,omitempty"`
	Error    string `json:"error,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Detail   string `json:"detail,omitempty"`
	N        int    `json:"n,omitempty"`
}

// emitter writes events to stdout, one whole line per write.
type emitter struct{ mu sync.Mutex }

func (e *emitter) emit(ev event) {
	if len(ev.Error) > maxEventError {
		ev.Error = ev.Error[:maxEventError]
	}
	b, err := json.Marshal(ev)
	if err != nil {
		panic(err) // event always marshals
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = os.Stdout.Write(append(b, '\n'))
}

// maxEventError keeps a huge error from flooding the event stream; the
// suite reads the stored error from the server, not from here.
const maxEventError = 200
