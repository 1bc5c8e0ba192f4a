package pulsetest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsequeue/pulse/pkg/pulse"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// DefaultTopic is the topic [Work] registers the handler for unless
// [WithTopic] names one.
const DefaultTopic = "pulsetest"

// WorkOption configures one [Work] call.
type WorkOption func(*workConfig)

type workConfig struct {
	topic        string
	jobID        string
	attempt      int
	enqueueOpts  []pulse.EnqueueOption
	registerOpts []pulse.RegisterOption
	middleware   []pulse.Middleware
	workerOpts   []pulse.WorkerOption
}

// WithTopic is the job's topic, for handlers that look at it (default
// [DefaultTopic]).
func WithTopic(topic string) WorkOption { return func(c *workConfig) { c.topic = topic } }

// WithJobID is the job's id (default a fresh "pulsetest-N").
func WithJobID(id string) WorkOption { return func(c *workConfig) { c.jobID = id } }

// WithAttempt is the attempt's number, from 1 (default 1), for handlers
// that behave differently on a retry.
func WithAttempt(n int) WorkOption { return func(c *workConfig) { c.attempt = n } }

// WithEnqueueOptions are the options the job was enqueued with, checked as
// pulse.Client.Enqueue checks them: pulse.Timeout bounds the attempt,
// pulse.MaxAttempts and pulse.Priority are what the handler sees.
func WithEnqueueOptions(opts ...pulse.EnqueueOption) WorkOption {
	return func(c *workConfig) { c.enqueueOpts = append(c.enqueueOpts, opts...) }
}

// WithRegisterOptions are the options the handler is registered with,
// such as pulse.WithTimeout.
func WithRegisterOptions(opts ...pulse.RegisterOption) WorkOption {
	return func(c *workConfig) { c.registerOpts = append(c.registerOpts, opts...) }
}

// WithMiddleware wraps the handler as pulse.Worker.Use does, the first
// outermost.
func WithMiddleware(mw ...pulse.Middleware) WorkOption {
	return func(c *workConfig) { c.middleware = append(c.middleware, mw...) }
}

// WithWorkerOptions are options for the worker that runs the handler
// (its logger, say; by default it logs to the test's log).
func WithWorkerOptions(opts ...pulse.WorkerOption) WorkOption {
	return func(c *workConfig) { c.workerOpts = append(c.workerOpts, opts...) }
}

var jobSeq atomic.Int64

// leaseTTL is the lease an assignment starts with; the gateway's
// heartbeat answers extend it.
const leaseTTL = 30 * time.Second

// Work runs handler on one job with args and returns what the worker
// reported. The job goes through a real [pulse.Worker], connected to an
// in-process gateway on a loopback port, so the handler runs exactly as
// in production: with the job's timeout as its context's deadline (and
// an overrun reported as "timed out after …"), inside its middleware,
// with a panic recovered as a failed attempt, and with [pulse.Permanent]
// and [pulse.RetryAfter] turned into the outcome and the wait the worker
// reports. ctx's values reach the handler's context, as pulse.Worker.Run's
// do; canceling ctx stops the worker and fails the test.
//
// args are encoded as pulse.Client.Enqueue encodes them (nil: {}; []byte
// and json.RawMessage as they are; anything else with encoding/json). An
// option or args the client would refuse fail the test.
func Work(ctx context.Context, t testing.TB, handler pulse.Handler, args any, opts ...WorkOption) *Result {
	t.Helper()
	cfg := workConfig{topic: DefaultTopic, attempt: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.jobID == "" {
		cfg.jobID = fmt.Sprintf("pulsetest-%d", jobSeq.Add(1))
	}
	if handler == nil {
		t.Fatalf("pulsetest: Work with a nil handler")
	}
	req := pulse.JobRequest{Topic: cfg.topic, Args: args, Options: cfg.enqueueOpts}
	spec, err := req.Spec()
	if err != nil {
		t.Fatalf("pulsetest: the job would not be enqueued: %v", err)
	}
	if cfg.attempt < 1 {
		t.Fatalf("pulsetest: attempt %d; attempts count from 1", cfg.attempt)
	}

	var (
		mu       sync.Mutex
		seen     *pulse.Job
		returned error
		panicked bool
	)
	capture := func(ctx context.Context, job *pulse.Job) (err error) {
		done := false
		defer func() {
			mu.Lock()
			defer mu.Unlock()
			seen, returned, panicked = job, err, !done
		}()
		err = handler(ctx, job)
		done = true
		return err
	}

	gw := fakegateway.New(t, "pulsetest", nil)
	workerOpts := append([]pulse.WorkerOption{
		pulse.WithLogger(testLogger(t)), pulse.WithWorkerID("pulsetest-worker"), pulse.WithConcurrency(1),
		// The result is in once Work stops the worker: a handler that
		// overran its timeout and is still running is canceled at once.
		pulse.WithShutdownTimeout(0),
	}, cfg.workerOpts...)
	w, err := pulse.NewWorker([]string{gw.Addr()}, workerOpts...)
	if err != nil {
		t.Fatalf("pulsetest: %v", err)
	}
	w.Use(cfg.middleware...)
	w.Register(cfg.topic, capture, cfg.registerOpts...)

	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil && ctx.Err() == nil {
			t.Errorf("pulsetest: the worker stopped with %v", err)
		}
	}()

	var stream *fakegateway.Stream
	select {
	case stream = <-gw.Streams():
	case err := <-ran:
		ran <- err
		t.Fatalf("pulsetest: the worker stopped before it connected: %v", err)
	case <-ctx.Done():
		t.Fatalf("pulsetest: %v before the worker connected", context.Cause(ctx))
	}
	stream.Assign(assignmentOf(cfg.jobID, int32(cfg.attempt), spec))

	var r *pulsev1.JobResult
	select {
	case r = <-gw.Results():
	case err := <-ran:
		ran <- err
		t.Fatalf("pulsetest: the worker stopped before it reported job %s: %v", cfg.jobID, err)
	case <-ctx.Done():
		t.Fatalf("pulsetest: %v before job %s was reported", context.Cause(ctx), cfg.jobID)
	}
	res := resultFromProto(r)
	mu.Lock()
	res.Job, res.Err, res.Panicked = seen, returned, panicked
	mu.Unlock()
	return res
}

// assignmentOf is the assignment a gateway would send for spec, with the
// server's defaults for what spec leaves out.
func assignmentOf(id string, attempt int32, spec *pulsev1.JobSpec) *pulsev1.Assignment {
	a := &pulsev1.Assignment{
		JobId:       id,
		Attempt:     attempt,
		Topic:       spec.GetTopic(),
		Args:        spec.GetArgs(),
		Priority:    pulsetype.DefaultPriority,
		MaxAttempts: pulsetype.DefaultMaxAttempts,
		SubmittedAt: timestamppb.Now(),
		LeaseUntil:  timestamppb.New(time.Now().Add(leaseTTL)),
	}
	if spec.GetHasPriority() {
		a.Priority = spec.GetPriority()
	}
	if n := spec.GetMaxAttempts(); n > 0 {
		a.MaxAttempts = n
	}
	if a.GetAttempt() > a.GetMaxAttempts() {
		a.MaxAttempts = a.GetAttempt()
	}
	if d := spec.GetTimeout(); d != nil {
		a.Timeout = durationpb.New(d.AsDuration())
	}
	return a
}

// testLogger writes the worker's log lines (a recovered panic's stack,
// say) to the test's log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
