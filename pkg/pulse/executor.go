package pulse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/pulsequeue/pulse/pkg/errtext"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// maxErrorBytes bounds the error text reported for a failed attempt; it is
// stored in the job's history, which must stay small.
const maxErrorBytes = 4 << 10

// executor runs assignments: one goroutine per job, at most concurrency
// handlers at a time, each with a context the heartbeater can cancel. When a
// handler returns it queues the result and frees the slot, in that order.
type executor struct {
	handlers    map[string]Handler
	concurrency int
	sem         chan struct{}
	running     *runningJobs
	ledger      *slotLedger
	reporter    *reporter
	baseCtx     context.Context // values of Run's ctx, never canceled by it
	log         *slog.Logger
	wg          sync.WaitGroup
	// confirmLease asks a gateway whether the attempt's lease is still
	// held (renewing it if so); leaseTTL is the gateway's lease TTL. Both
	// are set by Worker.Run; without them every attempt is startable.
	confirmLease func(context.Context, jobKey) bool
	leaseTTL     func() time.Duration
}

func newExecutor(baseCtx context.Context, handlers map[string]Handler, concurrency int,
	running *runningJobs, ledger *slotLedger, rep *reporter, log *slog.Logger,
) *executor {
	return &executor{
		handlers:    handlers,
		concurrency: concurrency,
		sem:         make(chan struct{}, concurrency),
		running:     running,
		ledger:      ledger,
		reporter:    rep,
		baseCtx:     baseCtx,
		log:         log.With(logKeyComponent, "executor"),
	}
}

// start runs one assignment in its own goroutine. It never drops a claimed
// job: if the gateway sent more than the free slots, the extra jobs wait for
// a slot.
func (e *executor) start(a *pulsev1.Assignment) {
	k := jobKey{id: a.GetJobId(), attempt: a.GetAttempt()}
	ctx, cancel := context.WithCancelCause(extractTraceContext(e.baseCtx, a))
	if !e.running.add(k, a.GetTopic(), cancel, timeOf(a.GetLeaseUntil()), time.Now()) {
		cancel(nil)
		e.log.Error("gateway sent an attempt that is already running; ignoring the copy",
			logKeyJobID, k.id, logKeyAttempt, k.attempt)
		// The gateway counted a slot for the copy; give it back.
		e.ledger.assigned()
		e.ledger.finished()
		return
	}
	if held := e.ledger.assigned(); held > e.concurrency {
		e.log.Error("gateway sent more jobs than free slots; the extra job waits for a slot",
			logKeyJobID, k.id, logKeyCount, held)
	}
	job := jobFromAssignment(a)
	ctx, span := startProcessSpan(ctx, a)
	ctx = withCheckpoint(withJob(ctx, job), e.running, k)

	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		err := e.execute(ctx, job, k)
		endSpan(span, err)
		cancel(nil)
		e.running.remove(k)
		if errors.Is(err, errAbandoned) {
			// Nothing ran and the lease is gone: there is nothing to
			// report; the reaper retries the job (or already has).
			e.log.Warn("abandoned an attempt whose lease expired before its handler started; this worker was stalled (stopped, frozen, or starved) for longer than the lease",
				logKeyJobID, k.id, logKeyAttempt, k.attempt)
			e.ledger.finished()
			return
		}
		// The slot goes back to the gateway once the result is settled, not
		// when the handler returns: until then the row is still RUNNING and
		// leased to this worker.
		e.reporter.submit(e.result(job, err), span.SpanContext(), e.ledger.finished)
	}()
}

// execute waits for a slot and runs the job's handler, unless the
// attempt's lease lapsed before it got one (startable).
func (e *executor) execute(ctx context.Context, job *Job, k jobKey) error {
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("pulse: job stopped before it started: %w", context.Cause(ctx))
	}
	defer func() { <-e.sem }()
	if !e.startable(ctx, k) {
		return errAbandoned
	}
	h, ok := e.handlers[job.Topic]
	if !ok {
		return fmt.Errorf("pulse: no handler registered for topic %q", job.Topic)
	}
	return e.call(ctx, h, job)
}

// call runs h, turning a panic into an error so one bad job cannot crash
// the worker process.
func (e *executor) call(ctx context.Context, h Handler, job *Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			e.log.Error("handler panicked",
				logKeyJobID, job.ID, logKeyAttempt, job.Attempt, logKeyTopic, job.Topic,
				logKeyError, fmt.Sprint(v), logKeyStack, string(debug.Stack()))
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return h(ctx, job)
}

func (e *executor) result(job *Job, err error) *pulsev1.JobResult {
	res := &pulsev1.JobResult{JobId: job.ID, Attempt: int32(job.Attempt), Outcome: pulsev1.Outcome_OUTCOME_COMPLETE}
	switch {
	case err == nil:
	case IsPermanent(err):
		res.Outcome = pulsev1.Outcome_OUTCOME_FAIL_PERMANENT
		res.Error = errorText(err)
	default:
		res.Outcome = pulsev1.Outcome_OUTCOME_FAIL
		res.Error = errorText(err)
	}
	return res
}

// idle returns a channel closed once every started job has finished.
func (e *executor) idle() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	return done
}

// errorText renders err for the wire and for storage: NUL and invalid
// UTF-8 become U+FFFD (protobuf requires valid UTF-8; Postgres refuses NUL)
// and the text is at most maxErrorBytes, cut on a character boundary and
// marked. The gateway sanitizes again on receipt.
func errorText(err error) string {
	return errtext.Sanitize(err.Error(), maxErrorBytes)
}
