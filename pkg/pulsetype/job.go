package pulsetype

import (
	"time"

	"github.com/google/uuid"
)

// NewJob is a validated job ready to insert. The id is minted by the caller
// (uuid v7 for submits, uuid v5 of schedule+occurrence for schedule fires)
// so a retried insert of the same id is a no-op.
type NewJob struct {
	ID             uuid.UUID
	Topic          string
	Args           []byte // a JSON object
	Priority       int16
	MaxAttempts    int32
	RunAt          time.Time // zero: now
	IdempotencyKey string    // empty: none
	ScheduleID     *uuid.UUID
	TraceParent    string
	TraceState     string
	// Timeout bounds one attempt (MinTimeout..MaxTimeout,
	// jobs_timeout_range); zero: none.
	Timeout time.Duration
	// UniqueFor makes the job unique by topic and args for this long
	// (MinUniqueFor..MaxUniqueFor, job_uniques): while another job holds
	// the key, the insert answers that job as a duplicate. Zero: not
	// unique.
	UniqueFor time.Duration
	// Retry is the job's own backoff between attempts; zero: the
	// retry_policy row's.
	Retry JobRetry
	// Tags label the job for listings (at most MaxTags, each ValidTag,
	// sorted and without duplicates; nil: none). Immutable.
	Tags []string
	// ReplaceKey makes the submit take the place of the key's pending,
	// never-started job of the topic (ReplaceMode says how) instead of
	// adding one; empty: none. 1..MaxReplaceKeyBytes. Not with
	// IdempotencyKey or UniqueFor.
	ReplaceKey  string
	ReplaceMode ReplaceMode
	// RateKey is the key a rate-limited topic counts the job's start
	// under (1..MaxRateKeyBytes of valid UTF-8; empty: none, and a topic
	// limited by an args field takes the key from that field at insert).
	// Immutable.
	RateKey string
	// DependsOn are the jobs this one waits for (ADR-0047): it is not
	// claimable until each is finished. Immutable; nil: none.
	DependsOn []Dependency
	// WorkflowID names the graph the job was submitted in; zero: none.
	WorkflowID uuid.UUID
	// ConcurrencyKey is the key a topic's max_running_per_key counts the
	// job's RUNNING under, and the lane the claim rotates over for
	// fairness (1..MaxFlowKeyBytes of valid UTF-8; empty: none).
	// Immutable.
	ConcurrencyKey string
	// SequenceKey makes the job start only after every job of its topic
	// submitted earlier with the same key has finished, one at a time
	// (1..MaxFlowKeyBytes of valid UTF-8; empty: none). Its topic needs a
	// sequence policy. Immutable.
	SequenceKey string
}

// ReplaceMode is what a submit with a ReplaceKey does to the key's pending
// job.
type ReplaceMode string

// The replace modes.
const (
	// ReplaceArgsAndRunAt: the job takes the submit's args and run_at.
	ReplaceArgsAndRunAt ReplaceMode = "replace"
	// ReplaceKeepEarlierRunAt: the job takes the submit's args and the
	// earlier of its run_at and the submit's.
	ReplaceKeepEarlierRunAt ReplaceMode = "keep_earlier_run_at"
	// ReplaceKeepFirst: the job stays as it is; the submit resolves to it.
	ReplaceKeepFirst ReplaceMode = "keep_first"
)

// ParseReplaceMode reads a mode's name; "" is ReplaceArgsAndRunAt.
func ParseReplaceMode(s string) (ReplaceMode, bool) {
	switch m := ReplaceMode(s); m {
	case "":
		return ReplaceArgsAndRunAt, true
	case ReplaceArgsAndRunAt, ReplaceKeepEarlierRunAt, ReplaceKeepFirst:
		return m, true
	}
	return "", false
}

// JobRetry is one job's backoff between attempts (ADR-0018), in at most
// one form: exponential (Base, and Max or zero for the retry_policy row's
// cap), failed attempt n waiting about Base × 2^(n-1), jittered down by up
// to a fifth, at most Max; or Fixed, every failed attempt waiting exactly
// that long. The zero value follows the retry_policy row. The schema's
// pulse_retry_delay computes the wait; nothing in Go does.
type JobRetry struct {
	Base  time.Duration
	Max   time.Duration
	Fixed time.Duration
}

// IsZero reports whether the job follows the retry_policy row.
func (r JobRetry) IsZero() bool { return r == JobRetry{} }

// Inserted is the outcome of one NewJob: the id of the job that now stands
// for it, and whether that job existed already (same id, same live
// idempotency key, or same topic and args within a unique period).
type Inserted struct {
	ID        uuid.UUID
	Duplicate bool
	// Replaced: the job carried a ReplaceKey and replaced the args and
	// run_at of the key's pending job, which ID names (Duplicate too).
	Replaced bool
}
