// Package pulsehttp is control-api's HTTP/JSON contract: the bodies of its
// /v1 routes, declared once. control-api's handlers (httpapi) encode and
// decode these types, and clients — the pulse CLI — decode the same ones,
// so a field added or renamed on one side cannot drift from the other.
// The package holds types only and depends on nothing but the standard
// library; docs/cli.md and docs/pause.md show the routes.
//
// Conventions: times are RFC 3339 and null when unset; durations are Go
// durations ("30s", "1h30m"); args are a JSON object kept byte for byte.
package pulsehttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"
)

// JobSpec is the body of POST /v1/jobs, and each entry of POST
// /v1/jobs/batch's "jobs". Priority is a pointer so an explicit 0 differs
// from unset (the default, 5).
type JobSpec struct {
	Topic          string          `json:"topic"`
	Args           json.RawMessage `json:"args"`
	Priority       *int32          `json:"priority"`
	MaxAttempts    int32           `json:"max_attempts"`
	RunAt          *string         `json:"run_at"`
	IdempotencyKey string          `json:"idempotency_key"`
	// Timeout and UniqueFor are Go durations; empty or absent means none.
	Timeout   string `json:"timeout"`
	UniqueFor string `json:"unique_for"`
	// Retry is the job's own backoff; absent or null means the schema's
	// policy.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// Tags label the job for listings (GET /v1/jobs?tag=): at most 16,
	// each 1..64 of letters, digits and . _ : = / -.
	Tags []string `json:"tags,omitempty"`
	// ReplaceKey makes the submit take the place of the key's pending,
	// never-started job of the topic instead of adding one (debounce);
	// ReplaceMode says how: "replace" (the default: args and run_at),
	// "keep_earlier_run_at" (args, and the earlier run_at) or "keep_first"
	// (nothing changes). Not with idempotency_key or unique_for.
	ReplaceKey  string `json:"replace_key,omitempty"`
	ReplaceMode string `json:"replace_mode,omitempty"`
	// DependsOn are the jobs this one waits for (docs/workflows.md): each
	// a job id or "$n" (the n-th job, from 0, of the same batch), as a
	// string or as {"job": "$0", "on_parent_failure": "run"}.
	DependsOn []Dependency `json:"depends_on,omitempty"`
	// RateKey is the key a rate-limited topic counts the job's start
	// under (docs/flow-control.md), 1..255 bytes; absent: none.
	RateKey string `json:"rate_key,omitempty"`
	// ConcurrencyKey is the key a topic's per-key cap counts the job
	// under while it runs (docs/flow-control.md), 1..255 bytes; absent:
	// none.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// SequenceKey makes the job start only after every earlier job of its
	// topic with the same key has finished (docs/flow-control.md),
	// 1..255 bytes; absent: none. The topic needs a sequence policy.
	SequenceKey string `json:"sequence_key,omitempty"`
}

// Dependency is one parent of a job: Job is a job id or "$n";
// OnParentFailure is "cancel" (the default: a parent that ends
// DEAD_LETTERED or CANCELED cancels the job) or "run" (the job runs once
// every parent is finished, whatever the outcome). In JSON, a bare string
// is a Dependency with the default policy.
type Dependency struct {
	Job             string `json:"job"`
	OnParentFailure string `json:"on_parent_failure,omitempty"`
}

// UnmarshalJSON reads a Dependency from a string or an object.
func (d *Dependency) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*d = Dependency{Job: s}
		return nil
	}
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return &json.UnmarshalTypeError{Value: "a JSON " + jsonKind(t), Type: reflect.TypeFor[Dependency]()}
	}
	type plain Dependency
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("a dependency is a job id, \"$n\", or {\"job\": ..., \"on_parent_failure\": \"cancel\"|\"run\"}: %w", err)
	}
	*d = Dependency(p)
	return nil
}

func jsonKind(b []byte) string {
	switch {
	case len(b) == 0:
		return "nothing"
	case b[0] == '[':
		return "array"
	case b[0] == 't' || b[0] == 'f':
		return "bool"
	case b[0] == 'n':
		return "null"
	}
	return "number"
}

// RetryPolicy is one job's backoff between attempts, in exactly one form:
// {"base": "2s", "max": "10m"} (exponential with jitter; max optional,
// defaulting to the schema policy's cap) or {"fixed": "30s"}. Durations
// are Go durations, 1ms to 366 days (8784h).
type RetryPolicy struct {
	Base  string `json:"base,omitempty"`
	Max   string `json:"max,omitempty"`
	Fixed string `json:"fixed,omitempty"`
}

// Batch is the body of POST /v1/jobs/batch; each entry is a JobSpec, kept
// raw so a bad one is refused naming its index.
type Batch struct {
	Jobs []json.RawMessage `json:"jobs"`
}

// SubmitResult answers one submitted job: its id, and whether it was a
// duplicate (an idempotency key or a unique period held by a live job).
type SubmitResult struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
	// Replaced: the submit replaced the args and run_at of its replace
	// key's pending job, which ID names.
	Replaced bool `json:"replaced,omitempty"`
}

// BatchResult answers POST /v1/jobs/batch, one result per job in order.
type BatchResult struct {
	Results []SubmitResult `json:"results"`
}

// Job is a job as GET /v1/jobs and the job routes show it.
type Job struct {
	ID    string `json:"id"`
	Topic string `json:"topic"`
	// Args is left out of a listing (GET /v1/jobs) unless it asks for it
	// with include=args; a single job always has it.
	Args     json.RawMessage `json:"args,omitempty"`
	Priority int32           `json:"priority"`
	Status   string          `json:"status"`
	Attempts int32           `json:"attempts"`
	// Snoozes counts the claims that ended in a snooze: the attempts
	// spent are Attempts - Snoozes.
	Snoozes        int32          `json:"snoozes"`
	MaxAttempts    int32          `json:"max_attempts"`
	Errors         []AttemptError `json:"errors"`
	LockedBy       string         `json:"locked_by"`
	LeaseUntil     *time.Time     `json:"lease_until"`
	NextRunAt      *time.Time     `json:"next_run_at"`
	SubmittedAt    *time.Time     `json:"submitted_at"`
	StartedAt      *time.Time     `json:"started_at"`
	FinishedAt     *time.Time     `json:"finished_at"`
	ScheduleID     string         `json:"schedule_id"`
	IdempotencyKey string         `json:"idempotency_key"`
	Traceparent    string         `json:"traceparent"`
	Tracestate     string         `json:"tracestate"`
	// Timeout is a Go duration ("30s"), null when the job has none.
	Timeout *string `json:"timeout"`
	// Retry is the job's own backoff, null when it follows the schema's
	// policy.
	Retry *RetryPolicy `json:"retry"`
	// Result is what the handler of a COMPLETED job returned (JSON),
	// absent when it returned nothing, and in listings.
	Result json.RawMessage `json:"result,omitempty"`
	// Progress is what the handler last reported (job.SetProgress,
	// 0..100), null when it never did; Metadata the JSON object its
	// job.SetMetadata calls built, absent when none.
	Progress *int32          `json:"progress"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Tags are the job's tags, sorted; absent when none.
	Tags []string `json:"tags,omitempty"`
	// ReplaceKey is the job's replace key, absent when none; Replaced
	// counts the submits that replaced its args and run_at while it was
	// pending.
	ReplaceKey string `json:"replace_key,omitempty"`
	Replaced   int32  `json:"replaced,omitempty"`
	// WorkflowID names the graph the job was submitted in (the id of the
	// first job of its batch), absent when none; BlockedBy counts its
	// unfinished parents (docs/workflows.md).
	WorkflowID string `json:"workflow_id,omitempty"`
	BlockedBy  int32  `json:"blocked_by,omitempty"`
}

// AttemptError is one entry of a job's error history.
type AttemptError struct {
	Attempt int32      `json:"attempt"`
	Error   string     `json:"error"`
	Worker  string     `json:"worker"`
	At      *time.Time `json:"at"`
}

// JobList is a page of jobs (GET /v1/jobs, GET /v1/schedules/{id}/jobs);
// pass NextPageToken back as page_token for the next one.
type JobList struct {
	Jobs          []Job  `json:"jobs"`
	NextPageToken string `json:"next_page_token"`
}

// JobWithWait is GET /v1/jobs/{id}: the job and, when it is PENDING or
// RETRYING, why it is not running.
type JobWithWait struct {
	Job
	Waiting *Wait `json:"waiting,omitempty"`
}

// Wait says why a job waits: "paused" (by whom, since when, why, until
// when), "scheduled" / "retry_backoff" / "snoozed" (until not_before),
// "breaker_open" (its topic's circuit breaker paused it until not_before),
// "rate_limited" (its topic's rate limit has no room for its key until
// not_before), "no_worker" (no
// connected worker serves its topic; worker_last_seen says when one last
// did, null if never), or "queued" behind Ahead jobs of its topic.
type Wait struct {
	Reason       string      `json:"reason"`
	PausedBy     *ScopeState `json:"paused_by,omitempty"`
	NotBefore    *time.Time  `json:"not_before,omitempty"`
	Ahead        int64       `json:"ahead"`
	AheadAtLeast bool        `json:"ahead_at_least,omitempty"`
	// WorkerLastSeen is present for no_worker only; its At is nil when no
	// worker ever served the topic.
	WorkerLastSeen *LastSeen `json:"worker_last_seen,omitempty"`
	// BlockedBy is, for sequence_blocked, the job of its sequence it
	// waits for.
	BlockedBy string `json:"blocked_by,omitempty"`
	// MaxRunningPerKey is, for concurrency_key_full, the topic's cap per
	// key, which the job's key has running.
	MaxRunningPerKey int32 `json:"max_running_per_key,omitempty"`
}

// LastSeen is a time that is present but null when unknown.
type LastSeen struct {
	At *time.Time
}

// MarshalJSON writes the time, or null.
func (l LastSeen) MarshalJSON() ([]byte, error) { return json.Marshal(l.At) }

// UnmarshalJSON reads a time or null.
func (l *LastSeen) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &l.At) }

// Pause is the body of POST /v1/dispatch/pause.
type Pause struct {
	Reason string `json:"reason"`
	// Mode is drain (the default) or quiesce.
	Mode  string `json:"mode"`
	Topic string `json:"topic"`
	// For is a Go duration ("30m", "2h"); Until an RFC 3339 time. At most
	// one; either makes the pause resume by itself.
	For   string `json:"for"`
	Until string `json:"until"`
}

// Resume is the body of POST /v1/dispatch/resume.
type Resume struct {
	Topic string `json:"topic"`
}

// ScopeState is one pause scope's state; Scope is "*" (every topic) or a
// topic.
type ScopeState struct {
	Scope     string     `json:"scope"`
	Paused    bool       `json:"paused"`
	Mode      string     `json:"mode"`
	Reason    string     `json:"reason"`
	Actor     string     `json:"actor"`
	PausedAt  *time.Time `json:"paused_at"`
	Until     *time.Time `json:"until"`
	UpdatedAt *time.Time `json:"updated_at"`
	Version   int64      `json:"version"`
}

// ScopeStatus is a scope with its live jobs.
type ScopeStatus struct {
	ScopeState
	Queued  int64 `json:"queued"`
	Running int64 `json:"running"`
	// Drained is running == 0: safe to upgrade what runs this scope.
	Drained bool `json:"drained"`
}

// DispatchState is GET /v1/dispatch.
type DispatchState struct {
	Version int64 `json:"version"`
	// Paused is the global scope's state, the one-glance answer.
	Paused bool          `json:"paused"`
	Scopes []ScopeStatus `json:"scopes"`
}

// ControlResult answers a pause or a resume: the scope's state after it,
// and whether anything changed.
type ControlResult struct {
	Changed bool       `json:"changed"`
	State   ScopeState `json:"state"`
}

// Event is one entry of the pause audit log.
type Event struct {
	ID      int64      `json:"id"`
	Scope   string     `json:"scope"`
	Action  string     `json:"action"`
	Mode    string     `json:"mode"`
	Reason  string     `json:"reason"`
	Actor   string     `json:"actor"`
	At      *time.Time `json:"at"`
	Until   *time.Time `json:"until"`
	Version int64      `json:"version"`
}

// EventList is GET /v1/dispatch/events, newest first.
type EventList struct {
	Events        []Event `json:"events"`
	NextPageToken string  `json:"next_page_token"`
}

// ScheduleDef is the body of POST /v1/schedules and PUT
// /v1/schedules/{id}, and the settable part of a Schedule.
type ScheduleDef struct {
	Name  string          `json:"name"`
	Topic string          `json:"topic"`
	Args  json.RawMessage `json:"args"`
	// Priority is a pointer so an explicit 0 differs from unset (the
	// default, 5, as for a job).
	Priority    *int32 `json:"priority"`
	MaxAttempts int32  `json:"max_attempts"`
	// Kind is at, every or cron.
	Kind       string `json:"kind"`
	Expression string `json:"expression"`
	TimeZone   string `json:"time_zone"`
	// Enabled is only read on create; nil means true.
	Enabled *bool `json:"enabled,omitempty"`
}

// Schedule is a schedule as the schedule routes show it.
type Schedule struct {
	ID string `json:"id"`
	ScheduleDef
	NextRunAt   *time.Time `json:"next_run_at"`
	LastFiredAt *time.Time `json:"last_fired_at"`
	CreatedAt   *time.Time `json:"created_at"`
	UpdatedAt   *time.Time `json:"updated_at"`
}

// ScheduleList is GET /v1/schedules, by name.
type ScheduleList struct {
	Schedules     []Schedule `json:"schedules"`
	NextPageToken string     `json:"next_page_token"`
}

// ErrorEnvelope is every error answer: {"error": {...}}.
type ErrorEnvelope struct {
	Error Error `json:"error"`
}

// Error says what went wrong: a code (invalid_argument, not_found,
// invalid_transition, ...), a message, and the field at fault when one is.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}
