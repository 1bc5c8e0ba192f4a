package pulse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
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

	// result is what SetResult recorded: JSON text, nil for none.
	result json.RawMessage
	// update sends SetProgress and SetMetadata to a gateway; nil outside
	// a worker (ErrNotRunning).
	update func(context.Context, *pulsev1.UpdateProgressRequest) (*pulsev1.UpdateProgressResponse, error)
	// parents reads the job's parents from a gateway; nil outside a
	// worker (ErrNotRunning).
	parents func(context.Context, *pulsev1.GetParentResultsRequest) (*pulsev1.GetParentResultsResponse, error)
}

// ParentResult is one parent of a job (a job it depended on, [DependsOn])
// as the job's handler reads it: by the time the job runs, every parent
// is finished.
type ParentResult struct {
	ID    string
	Topic string
	// Status is COMPLETED, or DEAD_LETTERED or CANCELED when the edge's
	// policy ran the job anyway ([DependsOnAnyway]).
	Status pulsetype.Status
	// Result is what the parent's handler recorded ([Job.SetResult]),
	// JSON; nil when it recorded none or did not complete.
	Result     json.RawMessage
	FinishedAt time.Time
}

// ParentResults reads the job's parents, each with its status and
// result, in id order; none for a job without parents. Only the worker
// holding the attempt's lease reads them ([ErrNotRunning] otherwise), as
// with [Job.SetProgress]: a handler that fans in reads its inputs here.
func (j *Job) ParentResults(ctx context.Context) ([]ParentResult, error) {
	if j.parents == nil {
		return nil, ErrNotRunning
	}
	resp, err := j.parents(ctx, &pulsev1.GetParentResultsRequest{JobId: j.ID, Attempt: int32(j.Attempt)})
	if err != nil {
		return nil, fmt.Errorf("pulse: read parent results of job %s: %w", j.ID, err)
	}
	if !resp.GetHeld() {
		return nil, fmt.Errorf("%w (job %s, attempt %d)", ErrNotRunning, j.ID, j.Attempt)
	}
	out := make([]ParentResult, len(resp.GetParents()))
	for i, p := range resp.GetParents() {
		out[i] = ParentResult{ID: p.GetJobId(), Topic: p.GetTopic(), Status: statusName(p.GetStatus())}
		if r := p.GetResult(); len(r) > 0 {
			out[i].Result = json.RawMessage(r)
		}
		if t := p.GetFinishedAt(); t != nil {
			out[i].FinishedAt = t.AsTime()
		}
	}
	return out, nil
}

// ErrNotRunning is SetProgress's and SetMetadata's error when the job's
// attempt is no longer this worker's to report on (it finished, was
// canceled, or its lease was lost), or the job is not run by a worker.
var ErrNotRunning = errors.New("pulse: the attempt is not running on this worker")

// SetProgress records how far the running attempt has come, 0 to 100,
// where operators and callers see it (GET /v1/jobs/{id}, the dashboard,
// [JobInfo.Progress]). It is sent to the gateway at once, and stored
// only while this worker holds the attempt's lease (the schema refuses it
// otherwise): [ErrNotRunning] says it no longer does. The value outlives
// the attempt; a retry starts from what it last said. Call it at steps,
// not in a tight loop: each call is a round trip and a row update.
func (j *Job) SetProgress(ctx context.Context, percent int) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("pulse: progress of job %s is %d; it must be between 0 and 100", j.ID, percent)
	}
	p := int32(percent)
	return j.sendProgress(ctx, &pulsev1.UpdateProgressRequest{Progress: &p})
}

// SetMetadata merges kv into the job's metadata, a JSON object operators
// and callers see beside its progress (the stage it is at, counts, an
// upstream id): each key replaces the same key, the others stay. Fenced
// as [Job.SetProgress] is; at most pulsetype.MaxMetadataPatchBytes per
// call and pulsetype.MaxMetadataStoredBytes in all.
func (j *Job) SetMetadata(ctx context.Context, kv map[string]any) error {
	b, err := json.Marshal(kv)
	if err != nil {
		return fmt.Errorf("pulse: encode metadata of job %s: %w", j.ID, err)
	}
	if len(b) > pulsetype.MaxMetadataPatchBytes {
		return fmt.Errorf("pulse: metadata of job %s is %d bytes; the limit is %d", j.ID, len(b), pulsetype.MaxMetadataPatchBytes)
	}
	return j.sendProgress(ctx, &pulsev1.UpdateProgressRequest{Metadata: b})
}

func (j *Job) sendProgress(ctx context.Context, req *pulsev1.UpdateProgressRequest) error {
	if j.update == nil {
		return ErrNotRunning
	}
	req.JobId, req.Attempt = j.ID, int32(j.Attempt)
	resp, err := j.update(ctx, req)
	if err != nil {
		return fmt.Errorf("pulse: update progress of job %s: %w", j.ID, err)
	}
	if !resp.GetHeld() {
		return fmt.Errorf("%w (job %s, attempt %d)", ErrNotRunning, j.ID, j.Attempt)
	}
	return nil
}

// SetResult records v as the job's result, stored with its completion:
// control-api returns it ([Client.Get], [Client.Wait], GET /v1/jobs/{id})
// until retention deletes the job. v is sent as-is when it is a []byte or
// json.RawMessage holding JSON, and JSON-encoded otherwise. A later call
// replaces an earlier one; a handler that returns an error stores none.
// Call it from the handler, before it returns.
//
// A result is an answer, not a file: it is refused here above
// pulsetype.MaxResultBytes, and a gateway stores at most its
// PULSE_MAX_RESULT_BYTES (64 KiB unless configured), dead-lettering a
// completion whose result is larger with an error that says so. Put large
// outputs in object storage and return their address.
func (j *Job) SetResult(v any) error {
	var b []byte
	switch r := v.(type) {
	case json.RawMessage:
		b = r
	case []byte:
		b = r
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return fmt.Errorf("pulse: encode result of job %s: %w", j.ID, err)
		}
	}
	if !json.Valid(b) || !utf8.Valid(b) {
		return fmt.Errorf("pulse: result of job %s is not valid JSON", j.ID)
	}
	if len(b) > pulsetype.MaxResultBytes {
		return fmt.Errorf("pulse: result of job %s is %d bytes; the limit is %d", j.ID, len(b), pulsetype.MaxResultBytes)
	}
	j.result = append(json.RawMessage(nil), b...)
	return nil
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
