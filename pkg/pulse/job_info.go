package pulse

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// JobInfo is the stored state of a job as control-api reports it, in plain
// Go types so callers need not import the generated protobuf package.
type JobInfo struct {
	ID       string
	Topic    string
	Args     json.RawMessage
	Priority int
	// Status is PENDING, RUNNING, RETRYING, COMPLETED, DEAD_LETTERED or
	// CANCELED (pulsetype.StatusPending …).
	Status pulsetype.Status
	// Attempts counts the job's claims (the latest attempt's number);
	// Snoozes those that ended in [Snooze]. The attempts spent, which
	// MaxAttempts bounds, are Attempts - Snoozes.
	Attempts    int
	Snoozes     int
	MaxAttempts int
	// Errors is the per-attempt failure history, oldest first.
	Errors []AttemptError
	// LockedBy holds the lease while RUNNING: the worker id, or, with
	// authentication on, "<credential name>/<worker id>" (the identity the
	// worker authenticated as; only it can heartbeat or report the job).
	LockedBy       string
	LeaseUntil     time.Time
	NextRunAt      time.Time
	SubmittedAt    time.Time
	StartedAt      time.Time
	FinishedAt     time.Time
	ScheduleID     string
	IdempotencyKey string
	// Timeout bounds each attempt; zero when the job has none of its own.
	Timeout time.Duration
	// Retry is the job's own backoff ([ExponentialBackoff],
	// [FixedBackoff]); zero when it follows the server's retry policy.
	Retry RetryPolicy
	// Result is what the handler of a COMPLETED job returned as JSON
	// ([Job.SetResult]); nil when it returned none. Decode it with
	// [JobInfo.UnmarshalResult].
	Result json.RawMessage
	// Progress is what the handler last reported ([Job.SetProgress]),
	// 0..100; -1 when it never did. Metadata is the JSON object its
	// [Job.SetMetadata] calls built; nil when none.
	Progress int
	Metadata json.RawMessage
	// Tags are the job's tags ([Tags]), sorted; nil when none.
	Tags []string
}

// ErrNoResult is UnmarshalResult's error for a job without a result.
var ErrNoResult = errors.New("pulse: the job has no result")

// UnmarshalResult decodes the job's result into v. A job that did not
// complete, or whose handler set no result, has none ([ErrNoResult]).
func (j *JobInfo) UnmarshalResult(v any) error {
	if len(j.Result) == 0 {
		return fmt.Errorf("%w (job %s is %s)", ErrNoResult, j.ID, j.Status)
	}
	if err := json.Unmarshal(j.Result, v); err != nil {
		return fmt.Errorf("pulse: unmarshal result of job %s: %w", j.ID, err)
	}
	return nil
}

// RetryPolicy is a job's own backoff between attempts: exponential from
// Base (at most Max, zero for the server's cap), or Fixed.
type RetryPolicy struct {
	Base  time.Duration
	Max   time.Duration
	Fixed time.Duration
}

// AttemptError is one failed attempt in a job's history, kept so operators
// can see why each retry happened and on which worker.
type AttemptError struct {
	Attempt int
	Error   string
	// Worker held the attempt's lease, spelled as LockedBy.
	Worker string
	At     time.Time
}

const statusPrefix = "JOB_STATUS_"

func statusName(s pulsev1.JobStatus) pulsetype.Status {
	return pulsetype.Status(strings.TrimPrefix(s.String(), statusPrefix))
}

// parseStatus accepts the names statusName produces, case-insensitively
// (pulsetype.ParseStatus); the empty string means no filter.
func parseStatus(s pulsetype.Status) (pulsev1.JobStatus, error) {
	if s == "" {
		return pulsev1.JobStatus_JOB_STATUS_UNSPECIFIED, nil
	}
	st, err := pulsetype.ParseStatus(string(s))
	if err != nil {
		return 0, err
	}
	v, ok := pulsev1.JobStatus_value[statusPrefix+st.String()]
	if !ok {
		return 0, fmt.Errorf("pulse: job status %s has no wire form", st)
	}
	return pulsev1.JobStatus(v), nil
}

func jobInfoFromProto(j *pulsev1.Job) *JobInfo {
	if j == nil {
		return nil
	}
	info := &JobInfo{
		ID:             j.GetId(),
		Topic:          j.GetTopic(),
		Args:           json.RawMessage(j.GetArgs()),
		Priority:       int(j.GetPriority()),
		Status:         statusName(j.GetStatus()),
		Attempts:       int(j.GetAttempts()),
		Snoozes:        int(j.GetSnoozes()),
		MaxAttempts:    int(j.GetMaxAttempts()),
		LockedBy:       j.GetLockedBy(),
		LeaseUntil:     timeOf(j.GetLeaseUntil()),
		NextRunAt:      timeOf(j.GetNextRunAt()),
		SubmittedAt:    timeOf(j.GetSubmittedAt()),
		StartedAt:      timeOf(j.GetStartedAt()),
		FinishedAt:     timeOf(j.GetFinishedAt()),
		ScheduleID:     j.GetScheduleId(),
		IdempotencyKey: j.GetIdempotencyKey(),
		Timeout:        j.GetTimeout().AsDuration(),
		Result:         resultOf(j.GetResult()),
		Progress:       -1,
		Metadata:       resultOf(j.GetMetadata()),
		Tags:           j.GetTags(),
		Retry: RetryPolicy{
			Base:  j.GetRetry().GetBase().AsDuration(),
			Max:   j.GetRetry().GetMax().AsDuration(),
			Fixed: j.GetRetry().GetFixed().AsDuration(),
		},
	}
	if j.Progress != nil {
		info.Progress = int(j.GetProgress())
	}
	for _, e := range j.GetErrors() {
		info.Errors = append(info.Errors, AttemptError{
			Attempt: int(e.GetAttempt()),
			Error:   e.GetError(),
			Worker:  e.GetWorker(),
			At:      timeOf(e.GetAt()),
		})
	}
	return info
}

// timeOf maps an unset timestamp to the zero time, so callers can test
// IsZero instead of checking for nil.
func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func resultOf(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}
