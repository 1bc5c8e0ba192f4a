package pulse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// Client enqueues and manages jobs through control-api. It is safe for
// concurrent use; create one per process and share it, because it holds a
// gRPC connection.
//
// Errors from the server are gRPC status errors wrapped with context;
// status.Code(err) still reports their code (NotFound, InvalidArgument,
// FailedPrecondition, ...).
type Client struct {
	conn         *grpc.ClientConn
	rpc          pulsev1.ControlServiceClient
	interceptors []EnqueueInterceptor
}

// NewClient creates a client for the control-api at target (for example
// "localhost:9090" or "dns:///control-api:9090"). It does not connect until
// the first call, so it succeeds while control-api is still starting.
// Without options it uses a plaintext connection; [WithTLS] or
// [WithTLSFiles] make it TLS, and credentials ([WithUserPass]) to an address
// that is not loopback need one of them ([ErrPlaintextCredentials]).
func NewClient(target string, opts ...ClientOption) (*Client, error) {
	var cfg clientConfig
	for _, o := range opts {
		o.applyClient(&cfg)
	}
	if err := cfg.conn.check(target); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(target, cfg.conn.grpcDialOptions(grpc.WithChainUnaryInterceptor(injectTraceContext))...)
	if err != nil {
		return nil, fmt.Errorf("pulse: dial control-api %q: %w", target, err)
	}
	return &Client{conn: conn, rpc: pulsev1.NewControlServiceClient(conn), interceptors: cfg.interceptors}, nil
}

// Close releases the client's connection; calls made afterwards fail.
func (c *Client) Close() error {
	return c.conn.Close()
}

// Submitted is the outcome of enqueuing one job.
type Submitted struct {
	ID string
	// Duplicate is true when nothing new was enqueued and ID is an
	// existing job's: an IdempotencyKey matched a live job, or a UniqueFor
	// job with the same topic and args holds its period, or a
	// ReplacePending key's pending job took its place.
	Duplicate bool
	// Replaced is true when a [ReplacePending] key's pending job (ID) took
	// this job's args and run time.
	Replaced bool
}

// JobRequest is one job for [Client.EnqueueMany], and what an
// [EnqueueInterceptor] sees of every job.
type JobRequest struct {
	Topic   string
	Args    any
	Options []EnqueueOption
}

// Spec is the wire form of the job that [Client.Enqueue] would submit,
// after the same checks (option ranges, a non-empty topic, args that
// encode to JSON). It is for code that submits by another route, such as
// package pulsetx's transactional enqueue; the server validates it again.
func (r *JobRequest) Spec() (*pulsev1.JobSpec, error) {
	return buildJobSpec(r.Topic, r.Args, r.Options)
}

// Enqueue submits one job to topic. args is sent as-is when it is a []byte
// or json.RawMessage (so large integers and key order survive), as {} when
// nil, and JSON-encoded otherwise. The client's interceptors
// ([WithEnqueueInterceptor]) run around it.
func (c *Client) Enqueue(ctx context.Context, topic string, args any, opts ...EnqueueOption) (Submitted, error) {
	return c.intercepted(c.submitOne)(ctx, &JobRequest{Topic: topic, Args: args, Options: opts})
}

// submitOne is Enqueue's RPC, the end of its interceptor chain.
func (c *Client) submitOne(ctx context.Context, req *JobRequest) (_ Submitted, err error) {
	ctx, span := startPublishSpan(ctx, req.Topic, 1)
	defer func() { endSpan(span, err) }()
	spec, err := req.Spec()
	if err != nil {
		return Submitted{}, err
	}
	resp, err := c.rpc.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: spec})
	if err != nil {
		return Submitted{}, fmt.Errorf("pulse: enqueue %s: %w", req.Topic, err)
	}
	span.SetAttributes(attrMessagingMessageID.String(resp.GetResult().GetId()))
	return submittedFromProto(resp.GetResult()), nil
}

// EnqueueMany submits jobs in one RPC that the server writes in one
// statement: either every job is enqueued or none is. Results are in
// request order. Each job passes through the client's interceptors on its
// own (see [EnqueueInterceptor]).
func (c *Client) EnqueueMany(ctx context.Context, jobs []JobRequest) ([]Submitted, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	if len(c.interceptors) == 0 {
		return c.submitMany(ctx, jobs)
	}
	return c.interceptMany(ctx, jobs)
}

// submitMany is EnqueueMany's RPC.
func (c *Client) submitMany(ctx context.Context, jobs []JobRequest) (_ []Submitted, err error) {
	topic := jobs[0].Topic
	for _, j := range jobs[1:] {
		if j.Topic != topic {
			topic = ""
			break
		}
	}
	ctx, span := startPublishSpan(ctx, topic, len(jobs))
	defer func() { endSpan(span, err) }()
	specs := make([]*pulsev1.JobSpec, len(jobs))
	for i, j := range jobs {
		spec, err := j.Spec()
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
		specs[i] = spec
	}
	resp, err := c.rpc.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{Jobs: specs})
	if err != nil {
		return nil, fmt.Errorf("pulse: enqueue %d jobs: %w", len(jobs), err)
	}
	if got := len(resp.GetResults()); got != len(jobs) {
		return nil, fmt.Errorf("pulse: enqueue %d jobs: server answered %d results", len(jobs), got)
	}
	out := make([]Submitted, len(jobs))
	for i, r := range resp.GetResults() {
		out[i] = submittedFromProto(r)
	}
	return out, nil
}

// Get returns the stored state of job id.
func (c *Client) Get(ctx context.Context, id string) (*JobInfo, error) {
	resp, err := c.rpc.GetJob(ctx, &pulsev1.GetJobRequest{Id: id})
	if err != nil {
		return nil, fmt.Errorf("pulse: get job %s: %w", id, err)
	}
	return jobInfoFromProto(resp.GetJob()), nil
}

// ListOptions filters and pages [Client.List]; the zero value lists the
// newest jobs of every topic and status.
type ListOptions struct {
	Topic string
	// Status is one of the JobInfo.Status names, in any case, or empty
	// for any.
	Status pulsetype.Status
	// Limit is 1..500; 0 means the server default (50).
	Limit int
	// PageToken continues a previous List; empty starts from the newest.
	PageToken string
	// IncludeArgs lists the jobs with their args; without it each
	// JobInfo's Args is empty (Get has them). Either way a page may end
	// before Limit, with a next page token, once its jobs' args and error
	// histories reach 4 MiB.
	IncludeArgs bool
	// Tag lists only the jobs carrying it ([Tags]); empty does not filter.
	Tag string
}

// List returns one page of jobs, newest first, and the token for the next
// page, which is empty on the last page.
func (c *Client) List(ctx context.Context, opts ListOptions) ([]*JobInfo, string, error) {
	status, err := parseStatus(opts.Status)
	if err != nil {
		return nil, "", err
	}
	resp, err := c.rpc.ListJobs(ctx, &pulsev1.ListJobsRequest{
		Topic:     opts.Topic,
		Status:    status,
		Limit:     int32(opts.Limit),
		PageToken: opts.PageToken,

		IncludeArgs: opts.IncludeArgs,
		Tag:         opts.Tag,
	})
	if err != nil {
		return nil, "", fmt.Errorf("pulse: list jobs: %w", err)
	}
	jobs := make([]*JobInfo, len(resp.GetJobs()))
	for i, j := range resp.GetJobs() {
		jobs[i] = jobInfoFromProto(j)
	}
	return jobs, resp.GetNextPageToken(), nil
}

// Cancel moves a pending, retrying or running job to CANCELED. A running
// attempt learns of it on its next heartbeat: its handler's context is
// canceled with [ErrJobCanceled] and its late result is rejected.
func (c *Client) Cancel(ctx context.Context, id string) (*JobInfo, error) {
	resp, err := c.rpc.CancelJob(ctx, &pulsev1.CancelJobRequest{Id: id})
	if err != nil {
		return nil, fmt.Errorf("pulse: cancel job %s: %w", id, err)
	}
	return jobInfoFromProto(resp.GetJob()), nil
}

// Retry moves a dead-lettered or canceled job back to PENDING with a fresh
// attempt budget, keeping its error history.
func (c *Client) Retry(ctx context.Context, id string) (*JobInfo, error) {
	resp, err := c.rpc.RetryJob(ctx, &pulsev1.RetryJobRequest{Id: id})
	if err != nil {
		return nil, fmt.Errorf("pulse: retry job %s: %w", id, err)
	}
	return jobInfoFromProto(resp.GetJob()), nil
}

func buildJobSpec(topic string, args any, opts []EnqueueOption) (*pulsev1.JobSpec, error) {
	var cfg enqueueConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkTopic(topic); err != nil {
		cfg.errs = append(cfg.errs, err)
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, err
	}
	raw, err := encodeArgs(args)
	if err != nil {
		return nil, fmt.Errorf("pulse: encode args for %s: %w", topic, err)
	}
	spec := &pulsev1.JobSpec{
		Topic:          topic,
		Args:           raw,
		Priority:       cfg.priority,
		HasPriority:    cfg.hasPriority,
		MaxAttempts:    cfg.maxAttempts,
		IdempotencyKey: cfg.idempotencyKey,
		ReplaceKey:     cfg.replaceKey,
		ReplaceMode:    cfg.replaceMode,
		RateKey:        cfg.rateKey,
		ConcurrencyKey: cfg.concurrencyKey,
		SequenceKey:    cfg.sequenceKey,
	}
	if !cfg.runAt.IsZero() {
		spec.RunAt = timestamppb.New(cfg.runAt)
	}
	if cfg.timeout > 0 {
		spec.Timeout = durationpb.New(cfg.timeout)
	}
	if cfg.uniqueFor > 0 {
		spec.UniqueFor = durationpb.New(cfg.uniqueFor)
	}
	spec.Retry = cfg.retry
	spec.DependsOn = cfg.dependsOn
	if len(cfg.tags) > 0 {
		spec.Tags = slices.Compact(slices.Sorted(slices.Values(cfg.tags)))
		if n := len(spec.GetTags()); n > pulsetype.MaxTags {
			return nil, fmt.Errorf("pulse: %d tags; the limit is %d", n, pulsetype.MaxTags)
		}
	}
	return spec, nil
}

var emptyArgs = []byte("{}")

func encodeArgs(args any) ([]byte, error) {
	switch a := args.(type) {
	case nil:
		return emptyArgs, nil
	case []byte:
		if len(a) == 0 {
			return emptyArgs, nil
		}
		return a, nil
	case json.RawMessage:
		if len(a) == 0 {
			return emptyArgs, nil
		}
		return a, nil
	default:
		return json.Marshal(args)
	}
}

func submittedFromProto(r *pulsev1.SubmitResult) Submitted {
	return Submitted{ID: r.GetId(), Duplicate: r.GetDuplicate(), Replaced: r.GetReplaced()}
}
