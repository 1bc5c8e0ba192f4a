package jobstore

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Status is a job's lifecycle state as stored in jobs.status.
type Status string

// The statuses of DESIGN.md's transition table.
const (
	StatusPending      Status = "PENDING"
	StatusRunning      Status = "RUNNING"
	StatusRetrying     Status = "RETRYING"
	StatusCompleted    Status = "COMPLETED"
	StatusDeadLettered Status = "DEAD_LETTERED"
	StatusCanceled     Status = "CANCELED"
)

// Statuses lists every status in lifecycle order.
var Statuses = []Status{StatusPending, StatusRunning, StatusRetrying, StatusCompleted, StatusDeadLettered, StatusCanceled}

// Terminal reports whether s is an end state (the job has finished_at).
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusDeadLettered || s == StatusCanceled
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// AttemptError is one entry of a job's error history.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
	Worker  string    `json:"worker"`
	At      time.Time `json:"at"`
}

// Job is one row of the jobs table.
type Job struct {
	ID             uuid.UUID
	Topic          string
	Args           json.RawMessage
	Priority       int16
	Status         Status
	Attempts       int32
	MaxAttempts    int32
	Errors         []AttemptError
	LockedBy       string
	LeaseUntil     *time.Time
	NextRunAt      time.Time
	SubmittedAt    time.Time
	StartedAt      *time.Time
	FinishedAt     *time.Time
	ScheduleID     *uuid.UUID
	IdempotencyKey string
	TraceParent    string
	TraceState     string
}

// jobColumns is the column list every full-row read uses, in scanJob order.
const jobColumns = `id, topic, args, priority, status, attempts, max_attempts, errors,
	COALESCE(locked_by, ''), lease_until, next_run_at, submitted_at, started_at, finished_at,
	schedule_id, COALESCE(idempotency_key, ''), COALESCE(traceparent, ''), COALESCE(tracestate, '')`

type rowScanner interface {
	Scan(dest ...any) error
}

func scanJob(row rowScanner) (*Job, error) {
	var j Job
	var status string
	var errs []byte
	if err := row.Scan(&j.ID, &j.Topic, &j.Args, &j.Priority, &status, &j.Attempts, &j.MaxAttempts, &errs,
		&j.LockedBy, &j.LeaseUntil, &j.NextRunAt, &j.SubmittedAt, &j.StartedAt, &j.FinishedAt,
		&j.ScheduleID, &j.IdempotencyKey, &j.TraceParent, &j.TraceState); err != nil {
		return nil, err
	}
	j.Status = Status(status)
	if len(errs) > 0 {
		if err := json.Unmarshal(errs, &j.Errors); err != nil {
			return nil, err
		}
	}
	return &j, nil
}
