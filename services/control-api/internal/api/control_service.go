package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobgraph"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// Paging bounds for ListJobs.
const (
	ListLimitDefault = 50
	ListLimitMax     = 500
)

// Store is the part of jobstore.Store the service uses.
type Store interface {
	Insert(ctx context.Context, jobs []pulsetype.NewJob) ([]pulsetype.Inserted, error)
	InsertGraph(ctx context.Context, jobs []pulsetype.NewJob) ([]pulsetype.Inserted, error)
	Get(ctx context.Context, id uuid.UUID) (*jobstore.Job, error)
	List(ctx context.Context, f jobstore.ListFilter) ([]*jobstore.Job, error)
	ListPage(ctx context.Context, f jobstore.ListFilter, window int) (jobstore.Page, error)
	Cancel(ctx context.Context, id uuid.UUID) (*jobstore.Job, error)
	Retry(ctx context.Context, id uuid.UUID) (*jobstore.Job, error)
	ExplainWait(ctx context.Context, job *jobstore.Job) (*jobstore.JobWait, error)
	WorkflowStore
}

// Submitter inserts one job, coalescing it with concurrent ones
// (submit.Coalescer).
type Submitter interface {
	Submit(ctx context.Context, job pulsetype.NewJob) (pulsetype.Inserted, error)
}

// Options configure a ControlService.
type Options struct {
	Limits       jobspec.Limits
	MaxBatchJobs int
	Metrics      *Metrics // nil: none
	// Waiters wakes WaitJob's waiters when their job finishes; nil:
	// WaitJob is unavailable.
	Waiters Waiters
	// Logger records the operator actions on workflows (cancel, retry)
	// with their actor; nil discards.
	Logger *slog.Logger
}

// Waiters is waiter.Hub as the service uses it.
type Waiters interface {
	Watch(ctx context.Context, id uuid.UUID) (<-chan struct{}, func(), error)
	Known(id uuid.UUID) (unfinished bool, token uint64)
	MarkUnfinished(id uuid.UUID, wake <-chan struct{}, token uint64)
}

// ControlService implements pulsev1.ControlServiceServer. Its errors are
// apierr errors; the gRPC interceptor and the HTTP transport each map them.
type ControlService struct {
	pulsev1.UnimplementedControlServiceServer

	store     Store
	submitter Submitter
	opts      Options
}

// NewControlService returns the service on store, with single submits going
// through submitter.
func NewControlService(store Store, submitter Submitter, opts Options) *ControlService {
	return &ControlService{store: store, submitter: submitter, opts: opts}
}

// SubmitJob validates one spec and enqueues it through the coalescer.
// Errors name fields as the request spells them ("job.topic").
func (s *ControlService) SubmitJob(ctx context.Context, req *pulsev1.SubmitJobRequest) (*pulsev1.SubmitJobResponse, error) {
	res, err := s.Submit(ctx, "job", req.GetJob())
	if err != nil {
		return nil, err
	}
	return &pulsev1.SubmitJobResponse{Result: res}, nil
}

// Submit is SubmitJob for a transport that spells the spec's place in its
// request differently: prefix "" names fields bare ("topic"), as the HTTP
// body, which is the spec itself, does.
func (s *ControlService) Submit(ctx context.Context, prefix string, spec *pulsev1.JobSpec) (*pulsev1.SubmitResult, error) {
	job, err := jobspec.Validate(prefix, spec, s.opts.Limits)
	if err != nil {
		return nil, err
	}
	jobspec.WithTraceContext(ctx, &job)
	if refs := [][]jobgraph.Ref{DependsOnFromWire(spec.GetDependsOn())}; jobgraph.Has(refs) {
		jobs := []pulsetype.NewJob{job}
		if err := jobgraph.Build(jobs, refs, func(int) string { return prefix }); err != nil {
			return nil, err
		}
		ins, err := s.store.InsertGraph(ctx, jobs)
		if err != nil {
			var refused *jobstore.MemberError
			if errors.As(err, &refused) {
				return nil, underField(prefix, refused.Err)
			}
			return nil, err
		}
		s.opts.Metrics.submitted(job.Topic, ins[0].Duplicate)
		return resultToWire(ins[0]), nil
	}
	ins, err := s.submitter.Submit(ctx, job)
	if err != nil {
		// The store names a refused job's field bare ("args").
		return nil, underField(prefix, err)
	}
	s.opts.Metrics.submitted(job.Topic, ins.Duplicate)
	return resultToWire(ins), nil
}

// SubmitJobs validates every spec, then inserts them all in one statement:
// one bad spec rejects the whole batch and nothing is written. A spec that
// passes validation yet is refused by Postgres (a constraint validation
// does not know) is named as validation would name it ("jobs[3].args").
func (s *ControlService) SubmitJobs(ctx context.Context, req *pulsev1.SubmitJobsRequest) (*pulsev1.SubmitJobsResponse, error) {
	specs := req.GetJobs()
	switch {
	case len(specs) == 0:
		return nil, apierr.Invalid("jobs", "is empty; submit at least one job")
	case s.opts.MaxBatchJobs > 0 && len(specs) > s.opts.MaxBatchJobs:
		return nil, apierr.Invalid("jobs", "has %d jobs; the limit is %d per call", len(specs), s.opts.MaxBatchJobs)
	}
	jobs := make([]pulsetype.NewJob, len(specs))
	refs := make([][]jobgraph.Ref, len(specs))
	for i, spec := range specs {
		job, err := jobspec.Validate(fmt.Sprintf("jobs[%d]", i), spec, s.opts.Limits)
		if err != nil {
			return nil, err
		}
		jobspec.WithTraceContext(ctx, &job)
		jobs[i] = job
		refs[i] = DependsOnFromWire(spec.GetDependsOn())
	}
	insert := s.store.Insert
	if jobgraph.Has(refs) {
		if err := jobgraph.Build(jobs, refs, func(i int) string { return fmt.Sprintf("jobs[%d]", i) }); err != nil {
			return nil, err
		}
		insert = s.store.InsertGraph
	}
	ins, err := insert(ctx, jobs)
	if err != nil {
		var refused *jobstore.MemberError
		if errors.As(err, &refused) {
			return nil, underField(fmt.Sprintf("jobs[%d]", refused.Index), refused.Err)
		}
		return nil, err
	}
	out := &pulsev1.SubmitJobsResponse{Results: make([]*pulsev1.SubmitResult, len(ins))}
	for i, r := range ins {
		out.Results[i] = resultToWire(r)
		s.opts.Metrics.submitted(jobs[i].Topic, r.Duplicate)
	}
	return out, nil
}

// GetJob reads one job.
func (s *ControlService) GetJob(ctx context.Context, req *pulsev1.GetJobRequest) (*pulsev1.GetJobResponse, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	job, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	wait, err := s.store.ExplainWait(ctx, job)
	if err != nil {
		return nil, err
	}
	return &pulsev1.GetJobResponse{Job: JobToWire(job), Wait: WaitToWire(wait)}, nil
}

// ListJobs pages jobs newest first. It reads one job more than the page
// holds, so the last page has no next token instead of an empty page after.
func (s *ControlService) ListJobs(ctx context.Context, req *pulsev1.ListJobsRequest) (*pulsev1.ListJobsResponse, error) {
	return s.SearchJobs(ctx, JobQuery{Topic: req.GetTopic(), Status: req.GetStatus(), Limit: req.GetLimit(), PageToken: req.GetPageToken(),
		IncludeArgs: req.GetIncludeArgs(), Tag: req.GetTag()})
}

// CancelJob moves a live job to CANCELED.
func (s *ControlService) CancelJob(ctx context.Context, req *pulsev1.CancelJobRequest) (*pulsev1.CancelJobResponse, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	job, err := s.store.Cancel(ctx, id)
	if err != nil {
		return nil, err
	}
	s.opts.Metrics.canceled(job.Topic)
	return &pulsev1.CancelJobResponse{Job: JobToWire(job)}, nil
}

// RetryJob moves a DEAD_LETTERED or CANCELED job back to PENDING.
func (s *ControlService) RetryJob(ctx context.Context, req *pulsev1.RetryJobRequest) (*pulsev1.RetryJobResponse, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	job, err := s.store.Retry(ctx, id)
	if err != nil {
		return nil, err
	}
	s.opts.Metrics.retried(job.Topic)
	return &pulsev1.RetryJobResponse{Job: JobToWire(job)}, nil
}

// ParseJobID parses a job id, naming field when it is not a UUID.
func ParseJobID(field, s string) (uuid.UUID, error) {
	if s == "" {
		return uuid.Nil, apierr.Invalid(field, "is required")
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, apierr.Invalid(field, "%q is not a UUID", s)
	}
	return id, nil
}

// A page token is the unpadded base64url of the last listed job's 16-byte
// id; the next page starts below it.
func encodePageToken(id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString(id[:])
}

func decodePageToken(tok string) (uuid.UUID, error) {
	b, ok := decodeToken(tok)
	if !ok || len(b) != len(uuid.UUID{}) {
		return uuid.Nil, apierr.Invalid("page_token", "%q is not a page token from an earlier ListJobs answer", tok)
	}
	return uuid.UUID(b), nil
}

// decodeToken decodes a page token strictly: only the one spelling this
// service hands out (unpadded base64url, no line breaks, no stray bits)
// decodes, so junk is refused here and never reaches SQL.
func decodeToken(tok string) ([]byte, bool) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	if err != nil || base64.RawURLEncoding.EncodeToString(b) != tok {
		return nil, false
	}
	return b, true
}

// underField names err's field as the request spells it. The store names
// a refused job's field bare ("args"); a request holds the job under
// prefix ("job", "jobs[3]"; "" for an HTTP body that is the job itself).
func underField(prefix string, err error) error {
	var ae *apierr.Error
	if prefix == "" || !errors.As(err, &ae) || ae.Kind != apierr.KindInvalidArgument {
		return err
	}
	out := *ae
	out.Field = prefix
	if ae.Field != "" {
		out.Field = prefix + "." + ae.Field
	}
	return &out
}

func resultToWire(r pulsetype.Inserted) *pulsev1.SubmitResult {
	return &pulsev1.SubmitResult{Id: r.ID.String(), Duplicate: r.Duplicate, Replaced: r.Replaced}
}
