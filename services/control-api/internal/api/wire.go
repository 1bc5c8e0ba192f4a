package api

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobgraph"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

var statusToWire = map[pulsetype.Status]pulsev1.JobStatus{
	pulsetype.StatusPending:      pulsev1.JobStatus_JOB_STATUS_PENDING,
	pulsetype.StatusRunning:      pulsev1.JobStatus_JOB_STATUS_RUNNING,
	pulsetype.StatusRetrying:     pulsev1.JobStatus_JOB_STATUS_RETRYING,
	pulsetype.StatusCompleted:    pulsev1.JobStatus_JOB_STATUS_COMPLETED,
	pulsetype.StatusDeadLettered: pulsev1.JobStatus_JOB_STATUS_DEAD_LETTERED,
	pulsetype.StatusCanceled:     pulsev1.JobStatus_JOB_STATUS_CANCELED,
}

// StatusFromWire maps a wire status filter to the stored name; UNSPECIFIED
// means no filter ("").
func StatusFromWire(field string, s pulsev1.JobStatus) (pulsetype.Status, error) {
	if s == pulsev1.JobStatus_JOB_STATUS_UNSPECIFIED {
		return "", nil
	}
	for stored, wire := range statusToWire {
		if wire == s {
			return stored, nil
		}
	}
	return "", apierr.Invalid(field, "%d is not a known job status", int32(s))
}

// JobToWire converts a stored job to its wire form.
func JobToWire(j *jobstore.Job) *pulsev1.Job {
	out := &pulsev1.Job{
		Id:             j.ID.String(),
		Topic:          j.Topic,
		Args:           j.Args,
		Priority:       int32(j.Priority),
		Status:         statusToWire[j.Status],
		Attempts:       j.Attempts,
		Snoozes:        j.Snoozes,
		MaxAttempts:    j.MaxAttempts,
		LockedBy:       j.LockedBy,
		LeaseUntil:     timestampOrNil(j.LeaseUntil),
		NextRunAt:      timestamppb.New(j.NextRunAt),
		SubmittedAt:    timestamppb.New(j.SubmittedAt),
		StartedAt:      timestampOrNil(j.StartedAt),
		FinishedAt:     timestampOrNil(j.FinishedAt),
		IdempotencyKey: j.IdempotencyKey,
		Traceparent:    j.TraceParent,
		Tracestate:     j.TraceState,
		Result:         j.Result,
		Metadata:       j.Metadata,
		Tags:           j.Tags,
		ReplaceKey:     j.ReplaceKey,
		Replaced:       j.Replaced,
		BlockedBy:      j.BlockedBy,
	}
	if j.WorkflowID != nil {
		out.WorkflowId = j.WorkflowID.String()
	}
	if j.Progress >= 0 {
		p := int32(j.Progress)
		out.Progress = &p
	}
	if j.ScheduleID != nil {
		out.ScheduleId = j.ScheduleID.String()
	}
	if j.Timeout > 0 {
		out.Timeout = durationpb.New(j.Timeout)
	}
	out.Retry = RetryToWire(j.Retry)
	for _, e := range j.Errors {
		out.Errors = append(out.Errors, &pulsev1.AttemptError{
			Attempt: int32(e.Attempt),
			Error:   e.Error,
			Worker:  e.Worker,
			At:      timestamppb.New(e.At),
		})
	}
	return out
}

// DependsOnFromWire is a spec's depends_on as jobgraph reads it.
func DependsOnFromWire(deps []*pulsev1.Dependency) []jobgraph.Ref {
	if len(deps) == 0 {
		return nil
	}
	out := make([]jobgraph.Ref, len(deps))
	for k, d := range deps {
		out[k] = jobgraph.Ref{Job: d.GetJob(), OnParentFailure: PolicyFromWire(d.GetOnParentFailure())}
	}
	return out
}

// PolicyFromWire maps a wire policy to the stored name; an unknown value
// maps to its number, which jobgraph refuses naming the field.
func PolicyFromWire(p pulsev1.ParentFailurePolicy) pulsetype.ParentFailurePolicy {
	switch p {
	case pulsev1.ParentFailurePolicy_PARENT_FAILURE_POLICY_UNSPECIFIED, pulsev1.ParentFailurePolicy_PARENT_FAILURE_POLICY_CANCEL:
		return pulsetype.OnParentFailureCancel
	case pulsev1.ParentFailurePolicy_PARENT_FAILURE_POLICY_RUN:
		return pulsetype.OnParentFailureRun
	}
	return pulsetype.ParentFailurePolicy(strconv.Itoa(int(p)))
}

// RetryToWire is a job's own backoff in its wire form, nil when it
// follows the schema's policy.
func RetryToWire(r pulsetype.JobRetry) *pulsev1.RetryPolicy {
	if r.IsZero() {
		return nil
	}
	d := func(v time.Duration) *durationpb.Duration {
		if v == 0 {
			return nil
		}
		return durationpb.New(v)
	}
	return &pulsev1.RetryPolicy{Base: d(r.Base), Max: d(r.Max), Fixed: d(r.Fixed)}
}

// TimeFromWire is a wire timestamp as a time, nil when unset: the JSON
// transport and the dashboard show unset times as null and "—".
func TimeFromWire(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

func timestampOrNil(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}
