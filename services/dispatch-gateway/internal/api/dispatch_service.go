package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsequeue/pulse/pkg/errtext"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/storable"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/presence"
)

// Report folding: at most reportFlushers report statements in flight per
// gateway, each settling up to about reportBatchMax results. One flusher:
// a report statement has a large fixed cost in Postgres (planning, and
// preparing every CHECK constraint and the transition trigger's WHEN
// clause for the statement), so results that arrive while a statement runs
// are worth more folded into the next one than sent beside it. Measured in
// the throughput benchmark: ~60 results per statement with two flushers,
// ~90 with one, and 15-20 % less database CPU per job (docs/benchmarks.md).
const (
	reportFlushers = 1
	reportBatchMax = 2000
)

// Limits on what a worker may ask for.
const (
	MaxConcurrency   = 10000
	MaxWorkerIDBytes = pulsetype.MaxWorkerIDBytes
	MaxTopics        = 100
	MaxBatch         = 10000
	// MaxErrorBytes bounds a result's error text (errtext.Sanitize).
	MaxErrorBytes = pulsetype.MaxErrorBytes
)

// Store is what the service needs from jobstore.
type Store interface {
	Heartbeat(ctx context.Context, worker string, refs []pulsetype.AttemptRef, leaseTTL time.Duration) ([]pulsetype.Beat, error)
	Report(ctx context.Context, worker string, results []pulsetype.Result) ([]pulsetype.Ack, error)
	SetProgress(ctx context.Context, worker string, ref pulsetype.AttemptRef, progress *int16, metadata []byte) (bool, error)
	ParentResults(ctx context.Context, worker string, ref pulsetype.AttemptRef) ([]jobstore.ParentResult, bool, error)
}

// Observer is told about settled results and streams, for metrics.
type Observer interface {
	Reported(acks []pulsetype.Ack)
	Sent(n int)
}

// Config holds the lease terms the gateway hands to workers.
type Config struct {
	GatewayID         string
	LeaseTTL          time.Duration
	HeartbeatInterval time.Duration
	// Pause is the gate whose state streams and heartbeat answers carry;
	// nil sends none.
	Pause PauseState
	// BindLeases holds a worker's leases as its authenticated identity
	// plus its worker id (auth.LeaseHolder) instead of the worker id
	// alone, so no other identity's heartbeat or report can match them
	// (ADR-0012). On whenever authentication is.
	BindLeases bool
	// Presence records the streams in worker_presence and refuses a worker
	// id another identity streams as; nil records none.
	Presence *presence.Tracker
	// MaxStreamsPerIdentity caps the StreamJobs streams one authenticated
	// identity holds open on this gateway (PULSE_MAX_STREAMS_PER_IDENTITY);
	// one more is refused with ResourceExhausted. 0: no cap. Applied only
	// with authentication on (BindLeases): in open mode every caller is
	// the one anonymous identity.
	MaxStreamsPerIdentity int
	// MaxResultBytes is the largest result a completion stores
	// (PULSE_MAX_RESULT_BYTES); a larger one dead-letters its job with an
	// error saying so. 0: pulsetype.DefaultMaxResultBytes.
	MaxResultBytes int
}

// CreditObserver is told about credits refused because the stream does
// not hold that many jobs (dispatch.Registry.Credit); an Observer that
// implements it counts them.
type CreditObserver interface {
	ExcessCredits(n int)
}

// PauseState is the pause gate as the API reads it (pause.Gate).
type PauseState interface {
	// State is the last pause state read; nil before the gate is primed.
	State() *jobstore.DispatchState
	// Changed is closed at the next change.
	Changed() <-chan struct{}
}

// DispatchService implements pulsev1.DispatchServiceServer.
type DispatchService struct {
	pulsev1.UnimplementedDispatchServiceServer
	cfg          Config
	store        Store
	registry     *dispatch.Registry
	observer     Observer
	logger       *slog.Logger
	shutdown     chan struct{} // closed by Shutdown
	shutdownOnce sync.Once
	reports      *ReportBatcher

	streamsMu sync.Mutex
	streams   map[string]int // open streams by identity, when capped
}

// NewDispatchService builds the service on registry (the dispatcher's).
func NewDispatchService(cfg Config, store Store, registry *dispatch.Registry, observer Observer, logger *slog.Logger) *DispatchService {
	return &DispatchService{cfg: cfg, store: store, registry: registry, observer: observer, logger: logger,
		shutdown: make(chan struct{}), reports: NewReportBatcher(store, reportFlushers, reportBatchMax),
		streams: map[string]int{}}
}

// Shutdown ends every open stream so its worker reconnects to another
// replica; used on SIGTERM before GracefulStop.
func (s *DispatchService) Shutdown() { s.shutdownOnce.Do(func() { close(s.shutdown) }) }

// StreamJobs registers the worker's free slots, then sends what the
// dispatcher claims for it and takes credits back until either side ends.
func (s *DispatchService) StreamJobs(stream pulsev1.DispatchService_StreamJobsServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return apierr.Invalid("open", "the first message on the stream must be open")
	}
	if err := validateOpen(open); err != nil {
		return err
	}
	who := auth.IdentityFrom(stream.Context()).Name
	release, err := s.holdStream(who)
	if err != nil {
		return err
	}
	defer release()
	// Presence first: it refuses a worker id live under another identity,
	// on any replica, before this stream is welcomed.
	session, err := s.cfg.Presence.Open(stream.Context(), open.GetWorkerId(), who, open.GetTopics())
	if err != nil {
		return err
	}
	defer session.Close()
	if err := stream.Send(&pulsev1.StreamJobsResponse{Msg: &pulsev1.StreamJobsResponse_Welcome{Welcome: &pulsev1.Welcome{
		GatewayId:         s.cfg.GatewayID,
		LeaseTtl:          durationpb.New(s.cfg.LeaseTTL),
		HeartbeatInterval: durationpb.New(s.cfg.HeartbeatInterval),
	}}}); err != nil {
		return err
	}

	// The registry's id is what the claim writes to locked_by.
	w := s.registry.AddStream(s.leaseHolder(stream.Context(), open.GetWorkerId()), open.GetTopics(),
		int(open.GetConcurrency()), int(open.GetInFlight()))
	logger := s.logger.With("worker_id", open.GetWorkerId(), "principal", who)
	logger.Debug("worker stream opened", "topics", w.Topics, "concurrency", open.GetConcurrency(), "in_flight", open.GetInFlight())
	defer func() {
		if left := s.registry.Remove(w); len(left) > 0 {
			logger.Warn("stream closed with claimed jobs unsent; their leases will lapse and the reaper retries them", "jobs", len(left))
		}
	}()

	// An idle paused worker is told why it gets no work, and told again
	// only when what matters to it changes.
	var lastState string
	var pauseChanged <-chan struct{}
	sendState := func() error {
		pauseChanged = s.pauseChanged() // before the read: no change slips between
		view, key, ok := s.dispatchState(w.Topics)
		if !ok || key == lastState {
			return nil
		}
		lastState = key
		return stream.Send(&pulsev1.StreamJobsResponse{Msg: &pulsev1.StreamJobsResponse_DispatchState{DispatchState: view}})
	}
	if err := sendState(); err != nil {
		return err
	}

	ctx := stream.Context()
	var finished <-chan struct{} // set when the worker half-closes
	errc := make(chan error, 1)
	recvErr := (<-chan error)(errc) // nil once the worker half-closed
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			if c := msg.GetCredit(); c != nil {
				if c.GetSlots() < 0 || c.GetSlots() > MaxConcurrency {
					errc <- apierr.Invalid("credit.slots", "is %d; it must be between 0 and %d", c.GetSlots(), MaxConcurrency)
					return
				}
				if excess := s.registry.Credit(w, int(c.GetSlots())); excess > 0 {
					// More slots than the stream holds jobs: refused, so
					// the stream never has more than its concurrency.
					if o, ok := s.observer.(CreditObserver); ok {
						o.ExcessCredits(excess)
					}
					logger.Debug("credit beyond the jobs the stream holds refused", "slots", c.GetSlots(), "refused", excess)
				}
			}
		}
	}()

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-pauseChanged:
			if err := sendState(); err != nil {
				return err
			}
		case <-s.shutdown:
			return apierr.Unavailable("gateway shutting down; reconnect to another replica", nil)
		case <-session.Lost():
			return &apierr.Error{Kind: apierr.KindAlreadyExists,
				Msg: "worker id " + strconv.Quote(open.GetWorkerId()) + " is now streaming under another identity"}
		case err := <-recvErr:
			if !errors.Is(err, io.EOF) {
				return err
			}
			// The worker half-closed: it takes no more work. Claims already
			// in flight for it may still land; wait them out and send what
			// they took, so a worker that stops cleanly strands no lease.
			recvErr, finished = nil, s.registry.Finish(w)
		case <-finished:
			return s.sendOutbox(stream, w)
		case <-w.Ready():
			if err := s.sendOutbox(stream, w); err != nil {
				return err
			}
		}
	}
}

// holdStream counts a stream of identity who against
// MaxStreamsPerIdentity, refusing it with ResourceExhausted when who holds
// that many already; release uncounts it.
func (s *DispatchService) holdStream(who string) (release func(), err error) {
	limit := s.cfg.MaxStreamsPerIdentity
	if limit <= 0 || !s.cfg.BindLeases {
		return func() {}, nil
	}
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.streams[who] >= limit {
		return nil, status.Errorf(codes.ResourceExhausted,
			"identity %q has %d job streams open on this gateway, the limit (PULSE_MAX_STREAMS_PER_IDENTITY); close one or use another credential",
			who, limit)
	}
	s.streams[who]++
	return func() {
		s.streamsMu.Lock()
		defer s.streamsMu.Unlock()
		if s.streams[who]--; s.streams[who] <= 0 {
			delete(s.streams, who)
		}
	}, nil
}

// sendOutbox sends the jobs claimed for w since the last send, if any.
func (s *DispatchService) sendOutbox(stream pulsev1.DispatchService_StreamJobsServer, w *dispatch.Worker) error {
	jobs := w.TakeOutbox()
	if len(jobs) == 0 {
		return nil
	}
	msg := &pulsev1.Assignments{Jobs: make([]*pulsev1.Assignment, len(jobs))}
	spans := make([]trace.Span, len(jobs))
	for i, j := range jobs {
		msg.Jobs[i], spans[i] = tracedAssignment(stream.Context(), j)
	}
	err := stream.Send(&pulsev1.StreamJobsResponse{Msg: &pulsev1.StreamJobsResponse_Assignments{Assignments: msg}})
	endDispatchSpans(spans, err)
	if err != nil {
		// A send error ends the stream; the sent-or-not jobs are leased and
		// the lease covers them: the reaper recovers them when it lapses
		// (ADR-0004).
		return err
	}
	if s.observer != nil {
		s.observer.Sent(len(jobs))
	}
	return nil
}

func assignment(j pulsetype.Claimed) *pulsev1.Assignment {
	a := &pulsev1.Assignment{
		JobId:       j.ID.String(),
		Attempt:     j.Attempt,
		Topic:       j.Topic,
		Args:        j.Args,
		Priority:    int32(j.Priority),
		MaxAttempts: j.MaxAttempts,
		SubmittedAt: timestamppb.New(j.SubmittedAt),
		LeaseUntil:  timestamppb.New(j.LeaseUntil),
		Traceparent: j.TraceParent,
		Tracestate:  j.TraceState,
	}
	if j.Timeout > 0 {
		a.Timeout = durationpb.New(j.Timeout)
	}
	return a
}

func validateOpen(o *pulsev1.OpenStream) error {
	if err := validateWorkerID("open.worker_id", o.GetWorkerId()); err != nil {
		return err
	}
	if len(o.GetTopics()) == 0 {
		return apierr.Invalid("open.topics", "at least one topic is required")
	}
	if len(o.GetTopics()) > MaxTopics {
		return apierr.Invalid("open.topics", "has %d topics; the limit is %d", len(o.GetTopics()), MaxTopics)
	}
	for i, t := range o.GetTopics() {
		if err := jobspec.ValidateTopic(fmt.Sprintf("open.topics[%d]", i), t); err != nil {
			return err
		}
	}
	if o.GetConcurrency() < 1 || o.GetConcurrency() > MaxConcurrency {
		return apierr.Invalid("open.concurrency", "is %d; it must be between 1 and %d", o.GetConcurrency(), MaxConcurrency)
	}
	if o.GetInFlight() < 0 || o.GetInFlight() > o.GetConcurrency() {
		return apierr.Invalid("open.in_flight", "is %d; it must be between 0 and concurrency (%d)", o.GetInFlight(), o.GetConcurrency())
	}
	return nil
}

func validateWorkerID(field, id string) error {
	if id == "" {
		return apierr.Invalid(field, "is required")
	}
	if len(id) > MaxWorkerIDBytes {
		return apierr.Invalid(field, "is %d bytes; the limit is %d", len(id), MaxWorkerIDBytes)
	}
	// The id joins shared statements (every claim of this gateway, folded
	// reports): one Postgres cannot store would fail them all.
	return storable.Text(field, id)
}

// parseRef reads the i-th entry of the request list named list. The field
// name is formatted only for an error: this runs once per job.
func parseRef(list string, i int, id string, attempt int32) (pulsetype.AttemptRef, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return pulsetype.AttemptRef{}, apierr.Invalid(entryField(list, i, "job_id"), "%q is not a job id (a UUID)", id)
	}
	if attempt < 1 {
		return pulsetype.AttemptRef{}, apierr.Invalid(entryField(list, i, "attempt"), "is %d; attempts start at 1", attempt)
	}
	return pulsetype.AttemptRef{ID: u, Attempt: attempt}, nil
}

// Heartbeat extends every lease the worker still holds, in one statement.
// A beat for a lease the worker lost is answered lease_held=false, not an
// error.
func (s *DispatchService) Heartbeat(ctx context.Context, req *pulsev1.HeartbeatRequest) (*pulsev1.HeartbeatResponse, error) {
	if err := validateWorkerID("worker_id", req.GetWorkerId()); err != nil {
		return nil, err
	}
	if len(req.GetJobs()) > MaxBatch {
		return nil, apierr.Invalid("jobs", "has %d entries; the limit is %d", len(req.GetJobs()), MaxBatch)
	}
	refs := make([]pulsetype.AttemptRef, len(req.GetJobs()))
	for i, j := range req.GetJobs() {
		r, err := parseRef("jobs", i, j.GetJobId(), j.GetAttempt())
		if err != nil {
			return nil, err
		}
		refs[i] = r
	}
	beats, err := s.store.Heartbeat(ctx, s.leaseHolder(ctx, req.GetWorkerId()), refs, s.cfg.LeaseTTL)
	if err != nil {
		return nil, err
	}
	resp := &pulsev1.HeartbeatResponse{Results: make([]*pulsev1.HeartbeatResult, len(beats))}
	topics := make([]string, 0, len(beats))
	for i, b := range beats {
		r := &pulsev1.HeartbeatResult{JobId: b.Ref.ID.String(), Attempt: b.Ref.Attempt, LeaseHeld: b.LeaseHeld, Canceled: b.Canceled,
			Quiesced: b.Quiesced}
		if b.Topic != "" {
			topics = append(topics, b.Topic)
		}
		if b.LeaseHeld {
			r.LeaseUntil = timestamppb.New(b.LeaseUntil)
		}
		resp.Results[i] = r
	}
	if view, _, ok := s.dispatchState(topics); ok {
		resp.DispatchState = view
	}
	return resp, nil
}

// ReportResult settles a batch of attempts in one statement and answers
// each: OK, or FAILED_PRECONDITION when its fence no longer matches.
func (s *DispatchService) ReportResult(ctx context.Context, req *pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error) {
	if err := validateWorkerID("worker_id", req.GetWorkerId()); err != nil {
		return nil, err
	}
	if len(req.GetResults()) > MaxBatch {
		return nil, apierr.Invalid("results", "has %d entries; the limit is %d", len(req.GetResults()), MaxBatch)
	}
	worker := s.leaseHolder(ctx, req.GetWorkerId())
	results := make([]pulsetype.Result, len(req.GetResults()))
	for i, r := range req.GetResults() {
		ref, err := parseRef("results", i, r.GetJobId(), r.GetAttempt())
		if err != nil {
			return nil, err
		}
		var outcome pulsetype.Outcome
		switch r.GetOutcome() {
		case pulsev1.Outcome_OUTCOME_COMPLETE:
			outcome = pulsetype.OutcomeComplete
		case pulsev1.Outcome_OUTCOME_FAIL:
			outcome = pulsetype.OutcomeFail
		case pulsev1.Outcome_OUTCOME_FAIL_PERMANENT:
			outcome = pulsetype.OutcomeFailPermanent
		case pulsev1.Outcome_OUTCOME_SNOOZE:
			outcome = pulsetype.OutcomeSnooze
		default:
			return nil, apierr.Invalid(entryField("results", i, "outcome"), "must be COMPLETE, FAIL, FAIL_PERMANENT or SNOOZE")
		}
		msg := errtext.Sanitize(r.GetError(), MaxErrorBytes)
		if outcome != pulsetype.OutcomeComplete && outcome != pulsetype.OutcomeSnooze && msg == "" {
			msg = "(no error message)"
		}
		after, err := retryAfter(entryField("results", i, "retry_after"), r)
		if err != nil {
			return nil, err
		}
		results[i] = pulsetype.Result{Ref: ref, Outcome: outcome, Error: msg, Worker: worker, RetryAfter: after}
		if err := s.withResult(entryField("results", i, "result"), &results[i], r.GetResult()); err != nil {
			return nil, err
		}
	}
	acks, refused, err := s.reports.Report(ctx, results)
	if err != nil {
		return nil, err
	}
	if s.observer != nil {
		s.observer.Reported(settledAcks(acks, refused))
	}
	resp := &pulsev1.ReportResultResponse{Acks: make([]*pulsev1.ResultAck, len(acks))}
	for i, a := range acks {
		if refused != nil && refused[i] != nil {
			resp.Acks[i] = s.refusedAck(results[i], refused[i])
			continue
		}
		ack := &pulsev1.ResultAck{JobId: a.Ref.ID.String(), Attempt: a.Ref.Attempt}
		if a.Accepted {
			ack.Code = int32(codes.OK)
			ack.Status = statusToProto(a.Status)
		} else {
			ack.Code = int32(codes.FailedPrecondition)
			ack.Message = a.Reason
		}
		resp.Acks[i] = ack
	}
	return resp, nil
}

// UpdateProgress records a running attempt's progress and merges into its
// metadata, in the caller's name (leaseHolder): a worker that no longer
// holds the attempt is answered held=false and nothing changes.
func (s *DispatchService) UpdateProgress(ctx context.Context, req *pulsev1.UpdateProgressRequest) (*pulsev1.UpdateProgressResponse, error) {
	if err := validateWorkerID("worker_id", req.GetWorkerId()); err != nil {
		return nil, err
	}
	u, err := uuid.Parse(req.GetJobId())
	if err != nil {
		return nil, apierr.Invalid("job_id", "%q is not a job id (a UUID)", req.GetJobId())
	}
	if req.GetAttempt() < 1 {
		return nil, apierr.Invalid("attempt", "is %d; attempts start at 1", req.GetAttempt())
	}
	var progress *int16
	if req.Progress != nil {
		p := req.GetProgress()
		if p < 0 || p > 100 {
			return nil, apierr.Invalid("progress", "is %d; it must be between 0 and 100", p)
		}
		v := int16(p)
		progress = &v
	}
	var meta []byte
	if m := req.GetMetadata(); len(m) > 0 {
		if meta, err = validateMetadata("metadata", m); err != nil {
			return nil, err
		}
	}
	if progress == nil && meta == nil {
		return nil, apierr.Invalid("progress", "and metadata are both empty; send at least one")
	}
	held, err := s.store.SetProgress(ctx, s.leaseHolder(ctx, req.GetWorkerId()), pulsetype.AttemptRef{ID: u, Attempt: req.GetAttempt()}, progress, meta)
	if err != nil {
		return nil, err
	}
	return &pulsev1.UpdateProgressResponse{Held: held}, nil
}

// GetParentResults reads the parents of a running attempt's job, with
// each one's status and result, fenced as a heartbeat is: only the
// attempt's lease holder reads them (docs/workflows.md).
func (s *DispatchService) GetParentResults(ctx context.Context, req *pulsev1.GetParentResultsRequest) (*pulsev1.GetParentResultsResponse, error) {
	if err := validateWorkerID("worker_id", req.GetWorkerId()); err != nil {
		return nil, err
	}
	u, err := uuid.Parse(req.GetJobId())
	if err != nil {
		return nil, apierr.Invalid("job_id", "%q is not a job id (a UUID)", req.GetJobId())
	}
	if req.GetAttempt() < 1 {
		return nil, apierr.Invalid("attempt", "is %d; attempts start at 1", req.GetAttempt())
	}
	parents, held, err := s.store.ParentResults(ctx, s.leaseHolder(ctx, req.GetWorkerId()), pulsetype.AttemptRef{ID: u, Attempt: req.GetAttempt()})
	if err != nil {
		return nil, err
	}
	out := &pulsev1.GetParentResultsResponse{Held: held, Parents: make([]*pulsev1.ParentResult, len(parents))}
	for i, p := range parents {
		out.Parents[i] = &pulsev1.ParentResult{
			JobId: p.ID.String(), Topic: p.Topic, Status: parentStatus[p.Status], Result: p.Result,
		}
		if p.FinishedAt != nil {
			out.Parents[i].FinishedAt = timestamppb.New(*p.FinishedAt)
		}
	}
	return out, nil
}

// parentStatus is a parent's status on the wire.
var parentStatus = map[pulsetype.Status]pulsev1.JobStatus{
	pulsetype.StatusPending:      pulsev1.JobStatus_JOB_STATUS_PENDING,
	pulsetype.StatusRunning:      pulsev1.JobStatus_JOB_STATUS_RUNNING,
	pulsetype.StatusRetrying:     pulsev1.JobStatus_JOB_STATUS_RETRYING,
	pulsetype.StatusCompleted:    pulsev1.JobStatus_JOB_STATUS_COMPLETED,
	pulsetype.StatusDeadLettered: pulsev1.JobStatus_JOB_STATUS_DEAD_LETTERED,
	pulsetype.StatusCanceled:     pulsev1.JobStatus_JOB_STATUS_CANCELED,
}

// validateMetadata checks a metadata update: a JSON object of at most
// pulsetype.MaxMetadataPatchBytes that Postgres's jsonb will take.
func validateMetadata(field string, m []byte) ([]byte, error) {
	if len(m) > pulsetype.MaxMetadataPatchBytes {
		return nil, apierr.Invalid(field, "is %d bytes; the limit is %d", len(m), pulsetype.MaxMetadataPatchBytes)
	}
	trimmed := bytes.TrimSpace(m)
	if !json.Valid(trimmed) || len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, apierr.Invalid(field, "must be a JSON object")
	}
	if err := storable.JSON(field, trimmed); err != nil {
		return nil, err
	}
	return trimmed, nil
}

// withResult puts a completion's result on res. Only a completion may
// carry one, and it must be JSON: a worker sending anything else is
// broken and should hear so. One larger than the gateway stores
// (MaxResultBytes) is not refused, which would leave the job running until
// its lease lapsed and then run it again to the same end: the attempt
// fails permanently instead, with an error that says why, and the job is
// dead-lettered for an operator to see.
func (s *DispatchService) withResult(field string, res *pulsetype.Result, result []byte) error {
	if len(result) == 0 {
		return nil
	}
	if res.Outcome != pulsetype.OutcomeComplete {
		return apierr.Invalid(field, "is for OUTCOME_COMPLETE only")
	}
	if !json.Valid(result) {
		return apierr.Invalid(field, "is not valid JSON")
	}
	if !utf8.Valid(result) {
		return apierr.Invalid(field, "is not valid UTF-8")
	}
	limit := s.cfg.MaxResultBytes
	if limit <= 0 {
		limit = pulsetype.DefaultMaxResultBytes
	}
	if len(result) > limit {
		res.Outcome = pulsetype.OutcomeFailPermanent
		res.Error = fmt.Sprintf("the handler's result is %d bytes; this gateway stores at most %d (PULSE_MAX_RESULT_BYTES)", len(result), limit)
		return nil
	}
	res.Result = result
	return nil
}

// MinRetryAfter and MaxRetryAfter bound the wait a handler may ask for
// before its job's next attempt (JobResult.retry_after): the bounds of a
// job's own backoff (jobspec).
const (
	MinRetryAfter = pulsetype.MinRetryDelay
	MaxRetryAfter = pulsetype.MaxRetryDelay
)

// MaxSnooze bounds how long a snooze may put its job back for
// (JobResult.retry_after of OUTCOME_SNOOZE); a snooze may be 0, a job
// claimable again at once.
const MaxSnooze = pulsetype.MaxRetryDelay

// retryAfter is a result's retry_after, zero when unset. Only a retryable
// failure may carry one, and a snooze must: on a completion or a
// permanent failure there is no next attempt to wait for, and a worker
// sending one has a bug worth hearing about.
func retryAfter(field string, r *pulsev1.JobResult) (time.Duration, error) {
	if r.GetOutcome() == pulsev1.Outcome_OUTCOME_SNOOZE {
		if r.GetRetryAfter() == nil {
			return 0, apierr.Invalid(field, "is required for OUTCOME_SNOOZE: how long the job sleeps (0..%s)", MaxSnooze)
		}
		if d := r.GetRetryAfter(); d.GetSeconds() == 0 && d.GetNanos() == 0 {
			return 0, nil // claimable again at once
		}
		return jobspec.ValidateDuration(field, r.GetRetryAfter(), pulsetype.DurationResolution, MaxSnooze)
	}
	if r.GetRetryAfter() == nil {
		return 0, nil
	}
	if r.GetOutcome() != pulsev1.Outcome_OUTCOME_FAIL {
		return 0, apierr.Invalid(field, "is for OUTCOME_FAIL only, not %s", r.GetOutcome())
	}
	return jobspec.ValidateDuration(field, r.GetRetryAfter(), MinRetryAfter, MaxRetryAfter)
}

// leaseHolder is the locked_by that the caller's leases carry, and that
// its heartbeats and reports are fenced by: with BindLeases, composed from
// the identity the call authenticated as, so a worker id alone (which
// producers can read from a job) names nobody's leases. Hot-path cost: one
// string concatenation, no query.
func (s *DispatchService) leaseHolder(ctx context.Context, workerID string) string {
	if !s.cfg.BindLeases {
		return workerID
	}
	return auth.LeaseHolder(auth.IdentityFrom(ctx).Name, workerID)
}

func statusToProto(s pulsetype.Status) pulsev1.JobStatus {
	switch s {
	case pulsetype.StatusPending:
		return pulsev1.JobStatus_JOB_STATUS_PENDING
	case pulsetype.StatusRunning:
		return pulsev1.JobStatus_JOB_STATUS_RUNNING
	case pulsetype.StatusRetrying:
		return pulsev1.JobStatus_JOB_STATUS_RETRYING
	case pulsetype.StatusCompleted:
		return pulsev1.JobStatus_JOB_STATUS_COMPLETED
	case pulsetype.StatusDeadLettered:
		return pulsev1.JobStatus_JOB_STATUS_DEAD_LETTERED
	case pulsetype.StatusCanceled:
		return pulsev1.JobStatus_JOB_STATUS_CANCELED
	}
	return pulsev1.JobStatus_JOB_STATUS_UNSPECIFIED
}

// entryField names a field of one list entry in an error: results[3].job_id.
func entryField(list string, i int, field string) string {
	return fmt.Sprintf("%s[%d].%s", list, i, field)
}
