package pulse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsequeue/pulse/pkg/errtext"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// maxErrorBytes bounds the error text reported for a failed attempt; it is
// stored in the job's history, which must stay small.
const maxErrorBytes = pulsetype.MaxReportedErrorBytes

// timeoutGrace is how long a handler whose timeout passed may take to
// return on its own (its context is canceled at the deadline), so the
// attempt's error can say what it returned. After that the attempt fails
// without it, and its slot stays taken until it does return.
const timeoutGrace = time.Second

// topicHandler is what the executor runs for one topic: the handler
// wrapped in the worker's middleware, and the topic's default timeout.
type topicHandler struct {
	handler Handler
	timeout time.Duration
}

// executor runs assignments: one goroutine per job (a runner), at most concurrency
// handlers at a time, each with a context the heartbeater can cancel. When a
// handler returns it queues the result and frees the slot, in that order:
// at once while fewer than cap(behind) results wait to settle, else once
// its own result settled (ADR-0023).
type executor struct {
	handlers    map[string]topicHandler
	concurrency int
	sem         chan struct{}
	// behind holds one token per result settling behind its freed slot.
	behind   chan struct{}
	running  *runningJobs
	ledger   *slotLedger
	reporter *reporter
	baseCtx  context.Context // values of Run's ctx, never canceled by it
	log      *slog.Logger
	wg       sync.WaitGroup
	// runners runs each job's goroutine (and a timed handler's), reusing
	// goroutines whose stacks already grew; stopped when the worker stops.
	runners *runners
	// confirmLease asks a gateway whether the attempt's lease is still
	// held (renewing it if so); leaseTTL is the gateway's lease TTL. Both
	// are set by Worker.Run; without them every attempt is startable.
	confirmLease func(context.Context, jobKey) bool
	leaseTTL     func() time.Duration
	// updateProgress sends a job's progress and metadata to a gateway
	// (Job.SetProgress, Job.SetMetadata); set by Worker.Run.
	updateProgress func(context.Context, *pulsev1.UpdateProgressRequest) (*pulsev1.UpdateProgressResponse, error)
	// parentResults reads a job's parents from a gateway
	// (Job.ParentResults); set by Worker.Run.
	parentResults func(context.Context, *pulsev1.GetParentResultsRequest) (*pulsev1.GetParentResultsResponse, error)
}

func newExecutor(baseCtx context.Context, handlers map[string]topicHandler, concurrency, settleBehind int,
	running *runningJobs, ledger *slotLedger, rep *reporter, log *slog.Logger,
) *executor {
	return &executor{
		handlers:    handlers,
		concurrency: concurrency,
		sem:         make(chan struct{}, concurrency),
		behind:      make(chan struct{}, settleBehind),
		running:     running,
		ledger:      ledger,
		reporter:    rep,
		baseCtx:     baseCtx,
		log:         log.With(logKeyComponent, "executor"),
		runners:     newRunners(),
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
		e.log.ErrorContext(ctx, "gateway sent an attempt that is already running; ignoring the copy",
			logKeyJobID, k.id, logKeyAttempt, k.attempt)
		// The gateway counted a slot for the copy; give it back.
		e.ledger.assigned()
		e.ledger.finished()
		return
	}
	if held := e.ledger.assigned(); held > e.concurrency {
		e.log.ErrorContext(ctx, "gateway sent more jobs than free slots; the extra job waits for a slot",
			logKeyJobID, k.id, logKeyCount, held)
	}
	job := jobFromAssignment(a)
	job.update = e.updateProgress
	job.parents = e.parentResults
	if job.Timeout <= 0 {
		job.Timeout = e.handlers[job.Topic].timeout
	}
	ctx, span := startProcessSpan(ctx, a)
	ctx = withCheckpoint(withJob(ctx, job), e.running, k)

	e.wg.Add(1)
	e.runners.run(func() {
		defer e.wg.Done()
		overran, err := e.execute(ctx, job, k)
		endSpan(span, err)
		cancel(nil)
		e.running.remove(k)
		if errors.Is(err, errAbandoned) {
			// Nothing ran and the lease is gone: there is nothing to
			// report; the reaper retries the job (or already has).
			e.log.WarnContext(ctx, "abandoned an attempt whose lease expired before its handler started; this worker was stalled (stopped, frozen, or starved) for longer than the lease",
				logKeyJobID, k.id, logKeyAttempt, k.attempt)
			e.ledger.finished()
			return
		}
		// The slot goes back to the gateway now if fewer than cap(behind)
		// results are waiting to settle: the row stays RUNNING and leased
		// to this worker until the result settles, and the next job need
		// not wait for that. Otherwise it goes back once the result is
		// settled, so undeliverable results stop the worker from taking
		// more. A handler that overran its timeout and is still running
		// keeps its slot until it returns, so the worker never runs more
		// handlers than its concurrency.
		settled := e.ledger.finished
		switch {
		case overran != nil:
			settled = func() {
				go func() {
					<-overran
					e.ledger.finished()
				}()
			}
		case e.settleBehind():
			e.ledger.finished()
			settled = func() { <-e.behind }
		}
		e.reporter.submit(e.result(job, err), span.SpanContext(), settled)
	})
}

// settleBehind takes a place for one result to settle behind its freed
// slot, and reports whether there was one.
func (e *executor) settleBehind() bool {
	select {
	case e.behind <- struct{}{}:
		return true
	default:
		return false
	}
}

// execute waits for a slot and runs the job's handler, unless the
// attempt's lease lapsed before it got one (startable). overran is nil
// unless the handler outlived its timeout and its grace and is still
// running: it is closed when the handler returns.
func (e *executor) execute(ctx context.Context, job *Job, k jobKey) (overran <-chan struct{}, err error) {
	// A free slot is taken without asking for ctx.Done(): the job's
	// context makes its Done channel on first request, and with a slot
	// free (the common case) nothing needs it. ctx.Err() keeps a job
	// stopped before it got here from starting.
	if ctx.Err() != nil {
		return nil, fmt.Errorf("pulse: job stopped before it started: %w", context.Cause(ctx))
	}
	select {
	case e.sem <- struct{}{}:
	default:
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("pulse: job stopped before it started: %w", context.Cause(ctx))
		}
	}
	release := func() { <-e.sem }
	if !e.startable(ctx, k) {
		release()
		return nil, errAbandoned
	}
	th, ok := e.handlers[job.Topic]
	if !ok {
		release()
		return nil, fmt.Errorf("pulse: no handler registered for topic %q", job.Topic)
	}
	if job.Timeout <= 0 {
		defer release()
		return nil, e.call(ctx, th.handler, job)
	}
	return e.callWithTimeout(ctx, th.handler, job, release)
}

// callWithTimeout runs h with the job's timeout as its context's deadline.
// A handler still running at the deadline has failed the attempt
// (TimeoutError), whatever it returns later: its context is canceled with
// the TimeoutError as cause, and it gets timeoutGrace to return. One that
// does not is left running (Go cannot stop it): the attempt is reported
// failed now, and overran is closed, and the slot released, when it
// returns.
func (e *executor) callWithTimeout(ctx context.Context, h Handler, job *Job, release func()) (overran <-chan struct{}, err error) {
	timeout := &TimeoutError{Timeout: job.Timeout}
	tctx, cancel := context.WithTimeoutCause(ctx, job.Timeout, timeout)
	done := make(chan struct{})
	var herr error
	e.wg.Add(1)
	e.runners.run(func() {
		defer e.wg.Done()
		defer release()
		defer cancel()
		herr = e.call(tctx, h, job)
		close(done)
	})
	timedOut := func() bool { return errors.Is(context.Cause(tctx), ErrJobTimedOut) }
	select {
	case <-done:
		if timedOut() {
			return nil, &TimeoutError{Timeout: job.Timeout, Err: herr}
		}
		return nil, herr
	case <-tctx.Done():
	}
	if !timedOut() {
		// Stopped for another reason (lease lost, canceled, shutdown):
		// wait for the handler as without a timeout.
		<-done
		return nil, herr
	}
	grace := time.NewTimer(timeoutGrace)
	defer grace.Stop()
	select {
	case <-done:
		return nil, &TimeoutError{Timeout: job.Timeout, Err: herr}
	case <-grace.C:
	}
	e.log.WarnContext(ctx, "handler still running after its timeout; the attempt failed, and its slot stays taken until the handler returns (handlers should return when their context is done)",
		logKeyJobID, job.ID, logKeyAttempt, job.Attempt, logKeyTopic, job.Topic, "timeout", job.Timeout)
	return done, timeout
}

// call runs h, turning a panic into an error so one bad job cannot crash
// the worker process.
func (e *executor) call(ctx context.Context, h Handler, job *Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			e.log.ErrorContext(ctx, "handler panicked",
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
		res.Result = job.result
	case IsPermanent(err):
		res.Outcome = pulsev1.Outcome_OUTCOME_FAIL_PERMANENT
		res.Error = errorText(err)
	case isSnooze(err):
		d, _ := SnoozeOf(err)
		res.Outcome = pulsev1.Outcome_OUTCOME_SNOOZE
		res.RetryAfter = durationpb.New(d)
	default:
		if d, ok := RetryAfterOf(err); ok {
			res.RetryAfter = durationpb.New(d)
		}
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

// isSnooze reports whether err asks for a snooze and nothing wraps it in
// a RetryAfter (which fails the attempt instead).
func isSnooze(err error) bool {
	if _, ok := SnoozeOf(err); !ok {
		return false
	}
	_, retry := RetryAfterOf(err)
	return !retry
}
