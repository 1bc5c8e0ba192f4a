package pulsetype

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Claimed is a job the claim moved to RUNNING and leased to one worker. By
// the time the gateway sends it, no other worker can hold it.
type Claimed struct {
	ID          uuid.UUID
	Attempt     int32
	Topic       string
	Args        json.RawMessage
	Priority    int16
	MaxAttempts int32
	SubmittedAt time.Time
	LeaseUntil  time.Time
	WorkerID    string
	TraceParent string
	TraceState  string
	// Timeout bounds the attempt (jobs.timeout); zero: the job has none.
	Timeout time.Duration
}

// AttemptRef names one attempt of one job: the fence every worker call
// carries back.
type AttemptRef struct {
	ID      uuid.UUID
	Attempt int32
}

// Beat is the answer for one heartbeated attempt.
type Beat struct {
	Ref        AttemptRef
	LeaseHeld  bool
	LeaseUntil time.Time // zero unless LeaseHeld
	Canceled   bool      // the job was canceled while this attempt ran
	// Topic is the job's topic ("" when the job no longer exists).
	Topic string
	// Quiesced says the job's scope (global or its topic) is paused in
	// quiesce mode: the worker's checkpoints should hold.
	Quiesced bool
}

// Outcome is what a worker says happened to one attempt.
type Outcome int16

// Outcomes, numbered as they travel to the store's report statement.
const (
	OutcomeComplete      Outcome = 1
	OutcomeFail          Outcome = 2 // retry while attempts remain
	OutcomeFailPermanent Outcome = 3 // dead-letter now
	// OutcomeSnooze puts the job back to PENDING for RetryAfter without
	// spending the attempt (the job's snoozes grows by one instead).
	OutcomeSnooze Outcome = 4
)

// Result is one worker report. Worker is the reporting worker's id, the
// fence on locked_by; the store fills it in when empty.
type Result struct {
	Ref     AttemptRef
	Outcome Outcome
	Error   string
	Worker  string
	// RetryAfter, for OutcomeSnooze, is how long the job sleeps
	// (0..MaxRetryDelay). For OutcomeFail, it is the wait the handler asked for
	// before the next attempt (MinRetryDelay..MaxRetryDelay, checked by
	// the gateway), used instead of the job's backoff; zero: the backoff.
	// The failed attempt counts like any other (ADR-0018): on the last one
	// the job is dead-lettered.
	RetryAfter time.Duration
	// Result, for OutcomeComplete, is what the handler returned: JSON
	// text of at most MaxResultBytes (checked by the gateway), stored
	// with the COMPLETED status in the same statement; nil: none.
	Result []byte
}

// Ack answers one Result. A rejected result (Accepted false) changed
// nothing; Reason says why (stale attempt, canceled, another worker's).
type Ack struct {
	Ref         AttemptRef
	Accepted    bool
	Status      Status // the job's status after the report, when accepted
	Reason      string
	Topic       string
	SubmittedAt time.Time
	StartedAt   time.Time
	NextRunAt   time.Time // when a RETRYING job becomes claimable again
}
