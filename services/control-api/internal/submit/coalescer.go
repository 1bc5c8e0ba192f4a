package submit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"
)

// Inserter writes validated jobs, one statement on the happy path, and
// answers each job on its own: when Postgres refuses one job's data, only
// that job fails (jobstore.Store.InsertEach splits the batch with
// jobstore.Isolate). *jobstore.Store is the real one.
type Inserter interface {
	InsertEach(ctx context.Context, jobs []pulsetype.NewJob) ([]pulsetype.Inserted, []error)
}

// Options tune a Coalescer.
type Options struct {
	// MaxBatch is the most jobs one INSERT carries.
	MaxBatch int
	// Flushers is the most INSERTs in flight at once.
	Flushers int
	// OnFlush, when set, is told the size of every INSERT (for metrics).
	OnFlush func(rows int)
	Logger  *slog.Logger
}

// Stats counts what a Coalescer has done, for metrics and for tests that
// prove coalescing happens.
type Stats struct {
	Submits int64 // jobs accepted by Submit
	// Statements counts coalesced batches handed to the store: one INSERT
	// statement each, unless Postgres refused a job and the batch was split.
	Statements int64
	Queued     int // jobs waiting for a flusher right now
}

// Coalescer batches concurrent single submits with natural batching: a
// submit joins a queue, and up to Options.Flushers flusher goroutines each
// take everything queued (up to MaxBatch) and insert it in one statement.
// There is no timer and no linger: when nothing else is in flight a submit
// is inserted at once, and under load a batch grows by itself while the
// previous INSERTs run.
//
// Failure semantics. Jobs are validated before they are queued, including
// every value Postgres cannot store (package storable), so a batch INSERT
// rarely fails for one job's sake. When it does (a data error: a CHECK
// constraint, a value validation missed), the store splits the batch
// (jobstore.Isolate): every other job is inserted and only the culprit
// fails, with its own error. Any other failure (database unreachable,
// shutdown) is returned to every waiter of the batch it hit.
//
// Cancellation. Submit returns when its caller's ctx ends, but a job
// already taken by a flusher is still inserted: a caller that gave up may
// have enqueued its job. Producers that retry after a timeout should set an
// idempotency key, which makes the retry return the job already enqueued.
type Coalescer struct {
	store  Inserter
	opts   Options
	logger *slog.Logger

	// ctx bounds every INSERT; Close cancels it when its own deadline
	// passes, so a hung database cannot hold shutdown (or the pool) open.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	queue  []*request
	active int  // flusher goroutines running
	closed bool // Close was called: no new submits
	// stopped is closed when the last flusher exits after Close.
	stopped chan struct{}

	submits    atomic.Int64
	statements atomic.Int64
}

type request struct {
	ctx  context.Context
	job  pulsetype.NewJob
	done chan result // buffered: a flusher never blocks on a caller that left
}

type result struct {
	ins pulsetype.Inserted
	err error
}

// NewCoalescer returns a Coalescer inserting through store.
func NewCoalescer(store Inserter, opts Options) *Coalescer {
	if opts.MaxBatch < 1 {
		opts.MaxBatch = 1
	}
	if opts.Flushers < 1 {
		opts.Flushers = 1
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Coalescer{
		store: store, opts: opts, logger: logger.With(logging.Loop, "submit_coalescer"),
		ctx: ctx, cancel: cancel,
	}
}

// ErrClosed answers submits that arrive after Close.
var ErrClosed = apierr.Unavailable("control-api is shutting down", nil)

// Submit queues job for the next coalesced INSERT and waits for its own
// outcome, or for ctx to end (see the type's comment on cancellation).
func (c *Coalescer) Submit(ctx context.Context, job pulsetype.NewJob) (pulsetype.Inserted, error) {
	req := &request{ctx: ctx, job: job, done: make(chan result, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return pulsetype.Inserted{}, ErrClosed
	}
	c.queue = append(c.queue, req)
	c.submits.Add(1)
	if c.active < c.opts.Flushers {
		c.active++
		go c.flusher()
	}
	c.mu.Unlock()

	select {
	case r := <-req.done:
		return r.ins, r.err
	case <-ctx.Done():
		return pulsetype.Inserted{}, ctx.Err()
	}
}

// flusher inserts whatever is queued until the queue is empty, then exits;
// Submit starts a new one when fewer than Flushers are running.
func (c *Coalescer) flusher() {
	for {
		c.mu.Lock()
		batch := c.take()
		if batch == nil {
			c.active--
			if c.active == 0 && c.closed && c.stopped != nil {
				close(c.stopped)
				c.stopped = nil
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.flush(batch)
	}
}

// take removes up to MaxBatch live requests from the queue; a request whose
// caller already left is answered without being inserted. Call with mu held.
func (c *Coalescer) take() []*request {
	var batch []*request
	for len(c.queue) > 0 && len(batch) < c.opts.MaxBatch {
		req := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		if err := req.ctx.Err(); err != nil {
			req.done <- result{err: err}
			continue
		}
		batch = append(batch, req)
	}
	if len(c.queue) == 0 {
		c.queue = nil // let the backing array go
	}
	return batch
}

func (c *Coalescer) flush(batch []*request) {
	// The INSERT outlives any one caller: a canceled caller must not abort
	// the statement its neighbours are waiting on.
	ctx := c.ctx
	jobs := make([]pulsetype.NewJob, len(batch))
	for i, r := range batch {
		jobs[i] = r.job
	}
	started := time.Now()
	res, errs := c.insert(ctx, jobs)
	if telemetry.TracingOn() {
		traceInserts(batch, started, res, errs)
	}
	if errs == nil {
		for i, r := range batch {
			r.done <- result{ins: res[i]}
		}
		return
	}
	refused, failed := 0, 0
	var firstFailure error
	for i, r := range batch {
		err := errs[i]
		switch {
		case err == nil:
			r.done <- result{ins: res[i]}
			continue
		case rowSpecific(err):
			refused++
		default:
			failed++
			if firstFailure == nil {
				firstFailure = err
			}
		}
		r.done <- result{err: err}
	}
	if failed > 0 {
		c.logger.Error("coalesced insert failed", "rows", len(batch), "failed", failed, logging.Error, firstFailure)
	}
	if refused > 0 {
		c.logger.Warn("coalesced insert: the database refused rows; only they failed", "rows", len(batch), "refused", refused)
	}
}

func (c *Coalescer) insert(ctx context.Context, jobs []pulsetype.NewJob) ([]pulsetype.Inserted, []error) {
	if err := ctx.Err(); err != nil {
		return nil, fill(len(jobs), apierr.Unavailable("control-api is shutting down", err))
	}
	c.statements.Add(1)
	if c.opts.OnFlush != nil {
		c.opts.OnFlush(len(jobs))
	}
	res, errs := c.store.InsertEach(ctx, jobs)
	if errs != nil && ctx.Err() != nil {
		for i, err := range errs {
			if err != nil {
				errs[i] = apierr.Unavailable("control-api is shutting down", err)
			}
		}
	}
	return res, errs
}

// fill is n copies of err.
func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// rowSpecific reports whether err is about one job's data rather than the
// database as a whole.
func rowSpecific(err error) bool {
	switch apierr.KindOf(err) {
	case apierr.KindInvalidArgument, apierr.KindInvalidTransition:
		return true
	}
	return false
}

// Close stops taking submits and waits until every submit already accepted
// has been inserted. If ctx ends first, the INSERTs still running are
// canceled and every remaining waiter is answered Unavailable; Close then
// returns ctx's error once the flushers have exited. Either way no accepted
// submit is left without an answer.
func (c *Coalescer) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	if c.active == 0 {
		c.mu.Unlock()
		c.cancel()
		return nil
	}
	if c.stopped == nil {
		c.stopped = make(chan struct{})
	}
	stopped := c.stopped
	c.mu.Unlock()
	select {
	case <-stopped:
		c.cancel()
		return nil
	case <-ctx.Done():
		c.cancel()
		<-stopped
		return ctx.Err()
	}
}

// Stats reports counts so far.
func (c *Coalescer) Stats() Stats {
	c.mu.Lock()
	queued := len(c.queue)
	c.mu.Unlock()
	return Stats{Submits: c.submits.Load(), Statements: c.statements.Load(), Queued: queued}
}

const tracerName = "github.com/pulsequeue/pulse/services/control-api/internal/submit"

// traceInserts records an "insert <topic>" span in each submitter's trace
// (a child of its request's span): the coalesced INSERT ran outside any
// one request, so without it the job's trace would not show it.
func traceInserts(batch []*request, started time.Time, res []pulsetype.Inserted, errs []error) {
	for i, r := range batch {
		attrs := []attribute.KeyValue{
			attribute.String("messaging.system", "pulse"),
			attribute.String("messaging.operation.type", "create"),
			attribute.String("messaging.destination.name", r.job.Topic),
			attribute.String("db.system.name", "postgresql"),
			attribute.String("db.operation.name", "INSERT"),
			attribute.Int("pulse.batch_rows", len(batch)),
		}
		if errs == nil || errs[i] == nil {
			attrs = append(attrs, attribute.String("messaging.message.id", res[i].ID.String()))
		} else {
			attrs = append(attrs, attribute.String("error.type", "insert_failed"))
		}
		telemetry.JobSpan(tracerName, "insert "+r.job.Topic, trace.SpanContextFromContext(r.ctx), started, trace.SpanKindClient, attrs...)
	}
}
