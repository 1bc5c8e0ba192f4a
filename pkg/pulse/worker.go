package pulse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/tracelog"
)

// Shutdown bounds after the handler wait, named so Run's shutdown sequence
// reads as a list of steps.
const (
	// cancelGrace is how long Run waits for handlers after canceling them
	// at the end of the shutdown timeout.
	cancelGrace = 5 * time.Second
	// flushTimeout bounds the final delivery of queued results.
	flushTimeout = 10 * time.Second
)

// Handler runs one attempt of a job. Returning nil completes the job;
// returning an error fails the attempt, which is retried with backoff while
// attempts remain (wrap it with [Permanent] to dead-letter at once). A panic
// is recovered and counts as a failed attempt.
//
// ctx is canceled when the attempt should stop; context.Cause(ctx) tells
// why: [ErrLeaseLost], [ErrJobCanceled], [ErrWorkerShutdown] or, once the
// job's timeout has passed, an error matching [ErrJobTimedOut]. It
// carries the values of the context given to [Worker.Run], the job (see
// [JobFromContext]), the deadline of the job's timeout (see [Timeout] and
// [WithTimeout]) and the trace context the job was submitted with.
type Handler func(ctx context.Context, job *Job) error

// Middleware wraps a handler: it can act before and after it, change its
// context, or turn its error into another ([Worker.Use]).
type Middleware func(Handler) Handler

// Worker pulls jobs from dispatch-gateway replicas and runs them with the
// registered handlers. Register every handler, then call Run once.
type Worker struct {
	targets    []string
	cfg        workerConfig
	mu         sync.Mutex
	handlers   map[string]*registration
	middleware []Middleware
	started    bool
}

// NewWorker creates a worker that receives jobs from the dispatch-gateway
// replicas at targets, using one at a time and moving to the next when a
// stream breaks, so a gateway restart or scale-down does not stop the
// worker. It does not connect until Run.
func NewWorker(targets []string, opts ...WorkerOption) (*Worker, error) {
	if len(targets) == 0 {
		return nil, errors.New("pulse: at least one dispatch-gateway target is required")
	}
	for i, t := range targets {
		if t == "" {
			return nil, fmt.Errorf("pulse: dispatch-gateway target %d is empty", i)
		}
	}
	cfg := defaultWorkerConfig()
	for _, o := range opts {
		o.applyWorker(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := cfg.conn.check(targets...); err != nil {
		return nil, err
	}
	if cfg.workerID == "" {
		cfg.workerID = defaultWorkerID()
	}
	return &Worker{
		targets:  slices.Clone(targets),
		cfg:      cfg,
		handlers: make(map[string]*registration),
	}, nil
}

// ID returns the worker's identity, which the gateway records as the
// locked_by of every job it runs.
func (w *Worker) ID() string { return w.cfg.workerID }

// Register makes the worker run h for jobs of topic, with options such as
// [WithTimeout]. Registration is start-up wiring, so mistakes panic rather
// than return an error: an empty topic, a nil handler, an option out of
// range, a topic registered twice, or registering after Run started.
func (w *Worker) Register(topic string, h Handler, opts ...RegisterOption) {
	reg := &registration{handler: h}
	for _, o := range opts {
		o(reg)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case topic == "":
		panic("pulse: Register with an empty topic")
	case checkTopic(topic) != nil:
		panic(fmt.Sprintf("pulse: Register %q: %v", topic, checkTopic(topic)))
	case h == nil:
		panic(fmt.Sprintf("pulse: Register %q with a nil handler", topic))
	case len(reg.errs) > 0:
		panic(fmt.Sprintf("pulse: Register %q: %v", topic, errors.Join(reg.errs...)))
	case w.started:
		panic(fmt.Sprintf("pulse: Register %q after Run started", topic))
	}
	if _, dup := w.handlers[topic]; dup {
		panic(fmt.Sprintf("pulse: topic %q registered twice", topic))
	}
	w.handlers[topic] = reg
}

// Use wraps every handler of the worker in middleware, the first
// outermost: Use(a, b) runs a, which calls b, which calls the handler.
// Several calls add up in order, and apply to handlers registered before
// or after them. Middleware runs inside the attempt: its context is the
// handler's (with the job, the deadline and the trace), a panic in it is
// recovered like the handler's, and what it returns is the attempt's
// result. Like Register, Use panics after Run started or on a nil
// middleware.
func (w *Worker) Use(middleware ...Middleware) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("pulse: Use after Run started")
	}
	for i, m := range middleware {
		if m == nil {
			panic(fmt.Sprintf("pulse: Use with a nil middleware (argument %d)", i))
		}
	}
	w.middleware = append(w.middleware, middleware...)
}

// Run receives and runs jobs until ctx is done, then shuts down: it stops
// taking work, waits up to the shutdown timeout for running handlers,
// cancels the rest with [ErrWorkerShutdown], reports every result it can,
// and closes its connections. It returns nil after a normal shutdown and an
// error only for misuse (no handlers, a second call), an invalid target, or
// [ErrWorkerRefused]: before any gateway welcomed the worker, every gateway
// refused its credentials, worker id or topics. Gateway outages are not
// errors: Run logs them and reconnects.
func (w *Worker) Run(ctx context.Context) error {
	handlers, topics, err := w.start()
	if err != nil {
		return err
	}
	// Lines logged with a job's context carry its trace_id and span_id.
	log := slog.New(tracelog.NewHandler(w.cfg.logger.Handler())).With(logKeyWorkerID, w.cfg.workerID)
	pool, err := dialGateways(w.targets, w.cfg.conn.grpcDialOptions(grpc.WithChainUnaryInterceptor(injectTraceContext)))
	if err != nil {
		return err
	}
	defer func() {
		if err := pool.close(); err != nil {
			log.Warn("close gateway connections", logKeyError, err)
		}
	}()

	terms := newLeaseTerms()
	running := newRunningJobs()
	ledger := newSlotLedger()
	rep := newReporter(pool, terms, w.cfg.workerID, w.cfg.maxReportBatch, log)
	exec := newExecutor(context.WithoutCancel(ctx), handlers, w.cfg.concurrency, w.cfg.settleBehindOrDefault(), running, ledger, rep, log)
	dispatch := newDispatchWatch(log, running)
	hb := newHeartbeater(pool, terms, running, dispatch, w.cfg.workerID, log)
	exec.confirmLease, exec.leaseTTL = hb.confirm, terms.leaseTTL
	exec.updateProgress = func(ctx context.Context, req *pulsev1.UpdateProgressRequest) (*pulsev1.UpdateProgressResponse, error) {
		req.WorkerId = w.cfg.workerID
		ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		defer cancel()
		return pool.current().UpdateProgress(ctx, req)
	}
	exec.parentResults = func(ctx context.Context, req *pulsev1.GetParentResultsRequest) (*pulsev1.GetParentResultsResponse, error) {
		req.WorkerId = w.cfg.workerID
		ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		defer cancel()
		return pool.current().GetParentResults(ctx, req)
	}
	stream := newStreamLoop(pool, terms, ledger, exec, dispatch, w.cfg.workerID, topics, w.cfg.concurrency, log)

	// The reporter and heartbeater outlive ctx: handlers keep running, and
	// need their leases and results, while the worker winds down.
	flushCtx, stopFlush := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFlush()
	hbCtx, stopHeartbeats := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHeartbeats()
	var loops sync.WaitGroup
	loops.Go(func() { rep.run(flushCtx) })
	loops.Go(func() { hb.run(hbCtx) })

	log.Info("worker started", logKeyCount, len(topics))
	runErr := stream.run(ctx)

	w.windDown(exec, running, log)
	exec.runners.stop()
	stopHeartbeats()
	rep.stop()
	flushDeadline := time.AfterFunc(flushTimeout, stopFlush)
	loops.Wait()
	flushDeadline.Stop()
	if runErr != nil {
		log.Error("worker stopped: refused", logKeyError, runErr)
		return runErr
	}
	log.Info("worker stopped")
	return nil
}

// start marks the worker started and snapshots its handlers, each
// wrapped in the worker's middleware.
func (w *Worker) start() (map[string]topicHandler, []string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return nil, nil, ErrWorkerStarted
	}
	if len(w.handlers) == 0 {
		return nil, nil, ErrNoHandlers
	}
	w.started = true
	handlers := make(map[string]topicHandler, len(w.handlers))
	topics := make([]string, 0, len(w.handlers))
	for t, reg := range w.handlers {
		h := reg.handler
		for i := len(w.middleware) - 1; i >= 0; i-- {
			h = w.middleware[i](h)
			if h == nil {
				return nil, nil, fmt.Errorf("pulse: middleware %d returned a nil handler for topic %q", i, t)
			}
		}
		handlers[t] = topicHandler{handler: h, timeout: reg.timeout}
		topics = append(topics, t)
	}
	slices.Sort(topics)
	return handlers, topics, nil
}

// windDown waits for running handlers: up to the shutdown timeout, then
// briefly more after canceling them.
func (w *Worker) windDown(exec *executor, running *runningJobs, log *slog.Logger) {
	idle := exec.idle()
	if n := running.len(); n > 0 {
		log.Info("shutting down, waiting for running jobs", logKeyCount, n)
	}
	timeout := time.NewTimer(w.cfg.shutdownTimeout)
	defer timeout.Stop()
	select {
	case <-idle:
		return
	case <-timeout.C:
	}
	n := running.cancelAll(ErrWorkerShutdown)
	log.Warn("shutdown timeout reached, canceling running jobs", logKeyCount, n)
	grace := time.NewTimer(cancelGrace)
	defer grace.Stop()
	select {
	case <-idle:
	case <-grace.C:
		log.Error("handlers ignored cancellation; their results will be dropped", logKeyCount, running.len())
	}
}

// defaultWorkerID is hostname-pid-<6 random hex>: readable in locked_by,
// and unique even when two processes share a host name and pid (containers).
func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
