package jobstore

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// AttemptError is one entry of a job's error history.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
	Worker  string    `json:"worker"`
	At      time.Time `json:"at"`
}

// Job is one row of the jobs table.
type Job struct {
	ID       uuid.UUID
	Topic    string
	Args     json.RawMessage
	Priority int16
	Status   pulsetype.Status
	// Attempts counts the job's claims: the latest attempt's number, its
	// lease's fencing token.
	Attempts int32
	// Snoozes counts the claims that ended in a snooze (ADR-0044); the
	// attempts spent are Attempts - Snoozes.
	Snoozes        int32
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
	// Timeout bounds each attempt; zero: none (migration 00008).
	Timeout time.Duration
	// Retry is the job's own backoff; zero: the retry_policy row's
	// (migration 00010).
	Retry pulsetype.JobRetry
	// Result is what the handler of a COMPLETED job returned (JSON text,
	// migration 00002); nil when it returned none, and in listings.
	Result []byte
	// Progress is what the handler last reported of its progress
	// (job.SetProgress), 0..100; -1 when it never did. Metadata is the
	// JSON object its job.SetMetadata calls built; nil when none
	// (migration 00004).
	Progress int
	Metadata json.RawMessage
	// Tags are the job's tags, sorted; nil when it has none (migration
	// 00006).
	Tags []string
	// ReplaceKey is the key the job was submitted with (empty: none), and
	// Replaced how many submits of that key replaced its args and run_at
	// while it was pending; job_replacements holds each one (ADR-0049).
	ReplaceKey string
	Replaced   int32
	// BlockedBy counts the job's unfinished parents (ADR-0047): a job
	// with BlockedBy > 0 is PENDING and waits for them. WorkflowID names
	// the graph it was submitted in; nil when none (migration 00010).
	BlockedBy  int32
	WorkflowID *uuid.UUID
}

// rowScanner is a pgx row or rows.
type rowScanner interface {
	Scan(dest ...any) error
}

// decodeErrors renders a job's error history without ever failing: the
// schema admits any JSON array (jobs_errors_array, append-only), not just
// the entries pulse writes, and a job must stay readable whatever was
// appended to it by hand. An entry that is an object has each field that
// fits decoded; if one does not fit (an attempt of 1.5, an "at" that is not
// RFC 3339), or the entry is not an object, Error carries the entry's JSON
// text, so nothing in the history goes unseen.
func decodeErrors(b []byte) []AttemptError {
	if len(b) == 0 {
		return nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(b, &entries); err != nil {
		return []AttemptError{{Error: string(b)}}
	}
	out := make([]AttemptError, 0, len(entries))
	for _, raw := range entries {
		var e AttemptError
		if json.Unmarshal(raw, &e) == nil {
			out = append(out, e)
			continue
		}
		e = AttemptError{}
		var fields map[string]json.RawMessage
		if json.Unmarshal(raw, &fields) != nil {
			out = append(out, AttemptError{Error: string(raw)})
			continue
		}
		fits := true
		for key, dst := range map[string]any{"attempt": &e.Attempt, "error": &e.Error, "worker": &e.Worker, "at": &e.At} {
			if v, ok := fields[key]; ok && json.Unmarshal(v, dst) != nil {
				fits = false
			}
		}
		if !fits {
			e.Error = string(raw)
		}
		out = append(out, e)
	}
	return out
}
