package pulse

import (
	"context"
	"errors"
	"time"
)

var (
	// ErrLeaseLost is the cause of a handler context's cancellation when the
	// worker no longer holds the job's lease (the gateway says so, or
	// heartbeats failed for longer than the lease TTL). Another worker may
	// already be running the job, so the handler should stop promptly.
	ErrLeaseLost = errors.New("pulse: job lease lost")

	// ErrJobCanceled is the cause of a handler context's cancellation when an
	// operator or producer canceled the job while it was running; its result
	// will be rejected, so there is no point in finishing the work.
	ErrJobCanceled = errors.New("pulse: job canceled")

	// ErrWorkerShutdown is the cause of a handler context's cancellation when
	// the worker is shutting down and the handler outlived the shutdown
	// timeout.
	ErrWorkerShutdown = errors.New("pulse: worker shutting down")

	// ErrNoHandlers is returned by [Worker.Run] when nothing was registered,
	// because a worker without topics could never receive a job.
	ErrNoHandlers = errors.New("pulse: no handlers registered")

	// ErrWorkerStarted is returned by [Worker.Run] when it is called a second
	// time: a worker identity owns one set of leases and must not run twice.
	ErrWorkerStarted = errors.New("pulse: worker already started")

	// ErrWorkerRefused is returned (wrapped, with the gateway's own error)
	// by [Worker.Run] when, before any gateway ever welcomed the worker,
	// every gateway refused it for what it is: its credentials
	// (Unauthenticated, PermissionDenied), what it asked for
	// (InvalidArgument: its worker id, topics or concurrency), or its
	// worker id streaming under another identity (AlreadyExists).
	// Reconnecting cannot change those, so Run stops instead of retrying
	// forever. Once welcomed, a worker keeps reconnecting through any
	// error, since credentials may be rotating under it.
	ErrWorkerRefused = errors.New("pulse: every gateway refused the worker")

	// ErrJobTimedOut matches (errors.Is) the cause of a handler context's
	// cancellation when the job's timeout passed, and the error of the
	// attempt it failed. Its text says how long: "timed out after 30s".
	ErrJobTimedOut = errors.New("pulse: job timed out")
)

// TimeoutError is the cause of a handler context's cancellation when the
// attempt's timeout passed, and the attempt's error (wrapping what the
// handler returned, if anything): "timed out after 30s".
type TimeoutError struct {
	Timeout time.Duration
	// Err is what the handler returned, nil if it had not returned yet.
	Err error
}

func (e *TimeoutError) Error() string {
	msg := "timed out after " + e.Timeout.String()
	if e.Err != nil && !errors.Is(e.Err, context.DeadlineExceeded) && !errors.Is(e.Err, ErrJobTimedOut) {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrJobTimedOut) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrJobTimedOut }

// Unwrap is the handler's own error.
func (e *TimeoutError) Unwrap() error { return e.Err }

// permanentError marks a handler error as not worth retrying.
type permanentError struct {
	err error
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so the attempt is reported as a permanent failure and
// the job is dead-lettered now, whatever attempts remain. Use it when a retry
// cannot succeed (malformed arguments, a resource that no longer exists) so
// the job does not burn its retry budget. Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with
// [Permanent], so middleware can tell the two failure kinds apart.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// retryAfterError asks for the job's next attempt to wait a given time.
type retryAfterError struct {
	after time.Duration
	err   error
}

func (e *retryAfterError) Error() string {
	if e.err == nil {
		return "retry requested after " + e.after.String()
	}
	return e.err.Error()
}

func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter fails the attempt with err and asks for the job's next
// attempt to start d from now instead of after its backoff: a handler
// that knows when to come back (a rate limit's Retry-After, a resource
// that will be ready at a known time) says so. The failed attempt counts
// like any other, so on the job's last attempt it is dead-lettered
// instead (docs/adr/0018). d is clamped to [MinRetryDelay, MaxRetryDelay]
// and rounded up to a microsecond. err may be nil; the error history then
// says a retry was requested. [Permanent] wins when both wrap the error.
func RetryAfter(d time.Duration, err error) error {
	switch {
	case d < MinRetryDelay:
		d = MinRetryDelay
	case d > MaxRetryDelay:
		d = MaxRetryDelay
	}
	if r := d % time.Microsecond; r != 0 {
		d += time.Microsecond - r
	}
	return &retryAfterError{after: d, err: err}
}

// RetryAfterOf reports the wait err asked for with [RetryAfter], if err or
// any error it wraps was made by it, so middleware can see it.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// snoozeError puts the job back without spending its attempt.
type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return "job snoozed for " + e.d.String() }

// Snooze, returned by a handler, puts its job back to PENDING for d
// without spending an attempt: the job is not failed, nothing is added to
// its error history, and its next claim still gets a new attempt number
// (the lease's fencing token), while the attempts it has spent, which
// max_attempts bounds, stay where they were (docs/adr/0044). The job's
// snoozes count how many times it was put back. Use it when the job
// cannot run yet for a reason that is not its fault: a resource busy, an
// upstream not ready. d is clamped to [0, MaxRetryDelay] and rounded up to
// a microsecond; 0 makes the job claimable again at once. Wrapping the
// error (fmt.Errorf with %w) keeps the snooze; [Permanent] or
// [RetryAfter] around it win.
func Snooze(d time.Duration) error {
	switch {
	case d < 0:
		d = 0
	case d > MaxRetryDelay:
		d = MaxRetryDelay
	}
	if r := d % time.Microsecond; r != 0 {
		d += time.Microsecond - r
	}
	return &snoozeError{d: d}
}

// SnoozeOf reports how long err asked to snooze its job with [Snooze], if
// err or any error it wraps was made by it, so middleware can see it.
func SnoozeOf(err error) (time.Duration, bool) {
	var s *snoozeError
	if errors.As(err, &s) {
		return s.d, true
	}
	return 0, false
}
