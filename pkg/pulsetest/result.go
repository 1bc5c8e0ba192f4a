package pulsetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulse"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// Result is what a worker reported for one attempt.
type Result struct {
	// JobID and Attempt name the attempt.
	JobID   string
	Attempt int
	// Outcome is what the worker reported: pulsetype.OutcomeComplete,
	// OutcomeFail (retried while attempts remain), OutcomeFailPermanent
	// (dead-lettered now) or OutcomeSnooze (back to PENDING for
	// RetryAfter, no attempt spent).
	Outcome pulsetype.Outcome
	// Error is the error text the worker reported, as the job's history
	// would keep it ("" when the attempt completed).
	Error string
	// RetryAfter is the wait the handler asked for with pulse.RetryAfter
	// (zero: the job's backoff), or how long pulse.Snooze put it back for.
	RetryAfter time.Duration
	// Output is what the handler set with job.SetResult, as the gateway
	// would store it (JSON); nil when it set none.
	Output json.RawMessage

	// Job is the job as the handler saw it, and Err what the handler
	// itself returned; Panicked says it panicked instead. [Work] fills
	// them in; [Gateway.Dispatch], which runs the application's own
	// handler, cannot, and leaves them zero.
	Job      *pulse.Job
	Err      error
	Panicked bool
}

// Completed reports whether the attempt completed the job.
func (r *Result) Completed() bool { return r.Outcome == pulsetype.OutcomeComplete }

// RequireCompleted fails the test unless the attempt completed the job.
func (r *Result) RequireCompleted(t testing.TB) {
	t.Helper()
	if r.Outcome != pulsetype.OutcomeComplete {
		t.Fatalf("pulsetest: job %s attempt %d: want completed, got %s: %s", r.JobID, r.Attempt, outcomeName(r.Outcome), r.Error)
	}
}

// RequireFailed fails the test unless the attempt failed and will be
// retried while attempts remain; it returns the reported error text.
func (r *Result) RequireFailed(t testing.TB) string {
	t.Helper()
	if r.Outcome != pulsetype.OutcomeFail {
		t.Fatalf("pulsetest: job %s attempt %d: want failed (retried), got %s %q", r.JobID, r.Attempt, outcomeName(r.Outcome), r.Error)
	}
	return r.Error
}

// RequirePermanent fails the test unless the attempt failed permanently
// (the job is dead-lettered now); it returns the reported error text.
func (r *Result) RequirePermanent(t testing.TB) string {
	t.Helper()
	if r.Outcome != pulsetype.OutcomeFailPermanent {
		t.Fatalf("pulsetest: job %s attempt %d: want failed permanently, got %s %q", r.JobID, r.Attempt, outcomeName(r.Outcome), r.Error)
	}
	return r.Error
}

// RequireSnoozed fails the test unless the handler snoozed the job
// (pulse.Snooze); it returns how long for.
func (r *Result) RequireSnoozed(t testing.TB) time.Duration {
	t.Helper()
	if r.Outcome != pulsetype.OutcomeSnooze {
		t.Fatalf("pulsetest: job %s attempt %d: want snoozed, got %s %q", r.JobID, r.Attempt, outcomeName(r.Outcome), r.Error)
	}
	return r.RetryAfter
}

func outcomeName(o pulsetype.Outcome) string {
	switch o {
	case pulsetype.OutcomeComplete:
		return "completed"
	case pulsetype.OutcomeFail:
		return "failed (retried)"
	case pulsetype.OutcomeFailPermanent:
		return "failed permanently"
	case pulsetype.OutcomeSnooze:
		return "snoozed"
	}
	return "no outcome"
}

// resultFromProto reads a reported result.
func resultFromProto(r *pulsev1.JobResult) *Result {
	res := &Result{JobID: r.GetJobId(), Attempt: int(r.GetAttempt()), Error: r.GetError()}
	switch r.GetOutcome() {
	case pulsev1.Outcome_OUTCOME_COMPLETE:
		res.Outcome = pulsetype.OutcomeComplete
	case pulsev1.Outcome_OUTCOME_FAIL:
		res.Outcome = pulsetype.OutcomeFail
	case pulsev1.Outcome_OUTCOME_FAIL_PERMANENT:
		res.Outcome = pulsetype.OutcomeFailPermanent
	case pulsev1.Outcome_OUTCOME_SNOOZE:
		res.Outcome = pulsetype.OutcomeSnooze
	}
	if d := r.GetRetryAfter(); d != nil {
		res.RetryAfter = d.AsDuration()
	}
	if out := r.GetResult(); len(out) > 0 {
		res.Output = json.RawMessage(out)
	}
	return res
}
