package pulse

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// Job is one attempt of a job as its handler sees it.
type Job struct {
	// ID identifies the job across all its attempts.
	ID string
	// Attempt counts from 1; ID plus Attempt is the deduplication key for
	// at-least-once delivery.
	Attempt int
	Topic   string
	// Args is the JSON the producer enqueued, byte for byte.
	Args        json.RawMessage
	Priority    int
	MaxAttempts int
	SubmittedAt time.Time
	// Timeout is how long this attempt may run: the job's own ([Timeout]),
	// else its topic's ([WithTimeout]), else zero for none. The handler's
	// context carries the deadline.
	Timeout time.Duration
}

// UnmarshalArgs decodes the job's JSON arguments into v, so handlers do not
// repeat the same json.Unmarshal boilerplate. Wrap a decoding failure with
// [Permanent] if retrying the same bytes cannot help.
func (j *Job) UnmarshalArgs(v any) error {
	if err := json.Unmarshal(j.Args, v); err != nil {
		return fmt.Errorf("pulse: unmarshal args of job %s: %w", j.ID, err)
	}
	return nil
}

func jobFromAssignment(a *pulsev1.Assignment) *Job {
	return &Job{
		ID:          a.GetJobId(),
		Attempt:     int(a.GetAttempt()),
		Topic:       a.GetTopic(),
		Args:        json.RawMessage(a.GetArgs()),
		Priority:    int(a.GetPriority()),
		MaxAttempts: int(a.GetMaxAttempts()),
		SubmittedAt: timeOf(a.GetSubmittedAt()),
		Timeout:     a.GetTimeout().AsDuration(),
	}
}

type jobContextKey struct{}

func withJob(ctx context.Context, j *Job) context.Context {
	return context.WithValue(ctx, jobContextKey{}, j)
}

// JobFromContext returns the job a handler is running, so code deep in the
// call stack (loggers, middleware) can reach it without extra parameters.
func JobFromContext(ctx context.Context) (*Job, bool) {
	j, ok := ctx.Value(jobContextKey{}).(*Job)
	return j, ok
}
