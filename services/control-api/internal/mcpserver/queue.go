package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pulsequeue/pulse/pkg/errtext"
	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pausewire"
	"github.com/pulsequeue/pulse/pkg/server/storable"

	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

// MaxTopics is the most topics one claim names, as a gateway stream's.
const MaxTopics = 100

// System is the envelope every queue tool answers with: the pause state
// that matters to the call (the global scope and the call's topics), so
// an agent worker stops claiming and holds at its safe points exactly as
// an SDK worker does.
type System struct {
	Paused       bool                   `json:"paused" jsonschema:"true while nothing the call concerns may start: the global scope, or every topic asked for, is paused; claim nothing until it is false"`
	Mode         string                 `json:"mode" jsonschema:"the blocking pause's mode: drain (finish what runs) or quiesce (hold at the next step boundary until resumed); empty when not paused"`
	Reason       string                 `json:"reason" jsonschema:"the blocking pause's reason, as the operator gave it"`
	Version      int64                  `json:"version" jsonschema:"the pause state's version: the same version is the same state"`
	PausedScopes []pulsehttp.ScopeState `json:"paused_scopes" jsonschema:"every paused scope among the global scope and the call's topics"`
}

// ClaimArgs are queue.claim's arguments.
type ClaimArgs struct {
	WorkerID     string   `json:"worker_id" jsonschema:"your worker id: leases are held as your identity plus this id, and heartbeats and results must name it"`
	Topics       []string `json:"topics" jsonschema:"the topics you take jobs of (1 to 100)"`
	LeaseSeconds int      `json:"lease_seconds,omitempty" jsonschema:"how long the lease lasts without a heartbeat, in seconds (10 to 3600, default 300); a lapsed lease is retried by the reaper"`
}

// ClaimedJob is a job leased by queue.claim.
type ClaimedJob struct {
	ID          string         `json:"id"`
	Attempt     int32          `json:"attempt" jsonschema:"this attempt's number: heartbeat and settle with it"`
	Topic       string         `json:"topic"`
	Args        map[string]any `json:"args" jsonschema:"the job's arguments, a JSON object"`
	Priority    int32          `json:"priority"`
	MaxAttempts int32          `json:"max_attempts"`
	LeaseUntil  time.Time      `json:"lease_until" jsonschema:"heartbeat before this time or lose the job"`
	Timeout     string         `json:"timeout,omitempty" jsonschema:"the job's own time limit per attempt, a Go duration"`
}

// ClaimResult is queue.claim's answer.
type ClaimResult struct {
	Job    *ClaimedJob `json:"job" jsonschema:"the job leased to you; null when none could be (nothing due, or paused: see system)"`
	System System      `json:"system"`
}

// AttemptArgs name one attempt of one job held by the caller.
type AttemptArgs struct {
	WorkerID string `json:"worker_id" jsonschema:"the worker id the job was claimed with"`
	JobID    string `json:"job_id" jsonschema:"the job's id"`
	Attempt  int32  `json:"attempt" jsonschema:"the attempt queue.claim returned"`
}

// HeartbeatArgs are queue.heartbeat's arguments.
type HeartbeatArgs struct {
	AttemptArgs
	LeaseSeconds int `json:"lease_seconds,omitempty" jsonschema:"extend the lease by this many seconds from now (10 to 3600, default 300)"`
}

// HeartbeatResult is queue.heartbeat's answer.
type HeartbeatResult struct {
	LeaseHeld  bool       `json:"lease_held" jsonschema:"false: the job is no longer yours (lease expired, canceled, or another worker's); stop working on it"`
	LeaseUntil *time.Time `json:"lease_until" jsonschema:"the extended lease"`
	Canceled   bool       `json:"canceled" jsonschema:"the job was canceled: stop"`
	Quiesced   bool       `json:"quiesced" jsonschema:"the job's scope is paused in quiesce mode: hold at your next step boundary and heartbeat until it is false"`
	System     System     `json:"system"`
}

// FailArgs are queue.fail's arguments.
type FailArgs struct {
	AttemptArgs
	Error      string `json:"error" jsonschema:"what went wrong, for the job's error history"`
	Permanent  bool   `json:"permanent,omitempty" jsonschema:"true: no retry, dead-letter the job now"`
	RetryAfter string `json:"retry_after,omitempty" jsonschema:"retry no sooner than this Go duration (such as 30s); instead of the job's backoff; not with permanent"`
}

// SettleResult is queue.complete's and queue.fail's answer.
type SettleResult struct {
	Accepted bool   `json:"accepted" jsonschema:"false: the result changed nothing (see the error text)"`
	Status   string `json:"status" jsonschema:"the job's status after the result: COMPLETED, RETRYING or DEAD_LETTERED"`
	System   System `json:"system"`
}

var leaseBound = bound{prop: "lease_seconds", min: 0, max: LeaseMax.Seconds()}

func (s *Server) addQueueTools() {
	tool(s, &mcp.Tool{Name: ToolQueueClaim, Title: "Claim a job", Annotations: additive(false),
		Description: "Lease one due job of the given topics to you, in dispatch order (priority, then first in first out), exactly as a worker connected to a gateway would get it: refused while paused (system says why). Heartbeat before lease_until, then complete or fail it. Workers only."},
		s.claim, leaseBound)
	tool(s, &mcp.Tool{Name: ToolQueueHeartbeat, Title: "Heartbeat a job", Annotations: additive(true),
		Description: "Extend the lease of a job you hold. Answers whether you still hold it, whether it was canceled, and whether its scope is quiesced (hold at your next step boundary). Refused for a lease you do not hold. Workers only."},
		s.heartbeat, leaseBound)
	tool(s, &mcp.Tool{Name: ToolQueueComplete, Title: "Complete a job", Annotations: additive(false),
		Description: "Report a job you hold as done. Refused when the lease is not yours any more (expired and retried, canceled). Workers only."},
		func(ctx context.Context, in AttemptArgs) (SettleResult, string, error) {
			return s.settle(ctx, in, pulsetype.OutcomeComplete, "", 0)
		})
	tool(s, &mcp.Tool{Name: ToolQueueFail, Title: "Fail a job", Annotations: additive(false),
		Description: "Report a job you hold as failed: retried with backoff (or after retry_after) while attempts remain, else dead-lettered; permanent dead-letters it now. Workers only."},
		func(ctx context.Context, in FailArgs) (SettleResult, string, error) {
			outcome := pulsetype.OutcomeFail
			if in.Permanent {
				outcome = pulsetype.OutcomeFailPermanent
			}
			var after time.Duration
			if in.RetryAfter != "" {
				if in.Permanent {
					return SettleResult{}, "", apierr.Invalid("retry_after", "is for a failure that is retried, not a permanent one")
				}
				d, err := time.ParseDuration(in.RetryAfter)
				if err != nil {
					return SettleResult{}, "", apierr.Invalid("retry_after", "%q is not a duration such as 30s or 5m", in.RetryAfter)
				}
				if d < pulsetype.MinRetryDelay || d > pulsetype.MaxRetryDelay {
					return SettleResult{}, "", apierr.Invalid("retry_after", "is %s; it must be between %s and %s", d, pulsetype.MinRetryDelay, pulsetype.MaxRetryDelay)
				}
				after = d
			}
			if in.Error == "" {
				return SettleResult{}, "", apierr.Invalid("error", "is required: say what went wrong")
			}
			return s.settle(ctx, in.AttemptArgs, outcome, in.Error, after)
		})
}

func (s *Server) claim(ctx context.Context, in ClaimArgs) (ClaimResult, string, error) {
	if err := validateWorkerID(in.WorkerID); err != nil {
		return ClaimResult{}, "", err
	}
	if len(in.Topics) == 0 {
		return ClaimResult{}, "", apierr.Invalid("topics", "at least one topic is required")
	}
	if len(in.Topics) > MaxTopics {
		return ClaimResult{}, "", apierr.Invalid("topics", "has %d topics; the limit is %d", len(in.Topics), MaxTopics)
	}
	for i, t := range in.Topics {
		if err := jobspec.ValidateTopic("topics["+strconv.Itoa(i)+"]", t); err != nil {
			return ClaimResult{}, "", err
		}
	}
	lease, err := leaseOf(in.LeaseSeconds)
	if err != nil {
		return ClaimResult{}, "", err
	}
	// Presence first, as a gateway's stream open: it refuses a worker id
	// live under another identity, and says the topics have a worker
	// (for jobs.why_not_running) for as long as the lease.
	who := auth.IdentityFrom(ctx).Name
	if _, err := s.deps.Queue.OpenPresence(ctx, PresenceGateway, jobstore.Presence{WorkerID: in.WorkerID, Principal: who, Topics: in.Topics}, lease); err != nil {
		return ClaimResult{}, "", err
	}
	claimed, err := s.deps.Queue.Claim(ctx, in.Topics, []string{s.leaseHolder(ctx, in.WorkerID)}, lease)
	if err != nil {
		return ClaimResult{}, "", err
	}
	// The state is read after the claim, so the envelope is never older
	// than what the claim saw.
	sys, err := s.system(ctx, in.Topics)
	if err != nil {
		return ClaimResult{}, "", err
	}
	out := ClaimResult{System: sys}
	if len(claimed) == 0 {
		if sys.Paused {
			return out, fmt.Sprintf("no job: dispatch is paused (%s: %s); claim again once system.paused is false", sys.Mode, sys.Reason), nil
		}
		return out, "no job is due on these topics now", nil
	}
	c := claimed[0]
	job := &ClaimedJob{ID: c.ID.String(), Attempt: c.Attempt, Topic: c.Topic, Priority: int32(c.Priority), MaxAttempts: c.MaxAttempts, LeaseUntil: c.LeaseUntil}
	if c.Timeout > 0 {
		job.Timeout = c.Timeout.String()
	}
	dec := json.NewDecoder(bytes.NewReader(c.Args))
	dec.UseNumber() // big integers stay exact
	if err := dec.Decode(&job.Args); err != nil {
		return ClaimResult{}, "", fmt.Errorf("decode the args of job %s: %w", job.ID, err)
	}
	out.Job = job
	return out, fmt.Sprintf("claimed job %s (%s), attempt %d of %d, lease until %s", job.ID, job.Topic, job.Attempt, job.MaxAttempts,
		job.LeaseUntil.UTC().Format(time.RFC3339)), nil
}

func (s *Server) heartbeat(ctx context.Context, in HeartbeatArgs) (HeartbeatResult, string, error) {
	ref, err := parseAttempt(in.AttemptArgs)
	if err != nil {
		return HeartbeatResult{}, "", err
	}
	lease, err := leaseOf(in.LeaseSeconds)
	if err != nil {
		return HeartbeatResult{}, "", err
	}
	beats, err := s.deps.Queue.Heartbeat(ctx, s.leaseHolder(ctx, in.WorkerID), []pulsetype.AttemptRef{ref}, lease)
	if err != nil {
		return HeartbeatResult{}, "", err
	}
	var b pulsetype.Beat
	if len(beats) == 1 {
		b = beats[0]
	}
	var topics []string
	if b.Topic != "" {
		topics = []string{b.Topic}
	}
	sys, err := s.system(ctx, topics)
	if err != nil {
		return HeartbeatResult{}, "", err
	}
	out := HeartbeatResult{LeaseHeld: b.LeaseHeld, Canceled: b.Canceled, Quiesced: b.Quiesced, System: sys}
	if b.LeaseHeld {
		out.LeaseUntil = &b.LeaseUntil
	}
	switch {
	case b.Canceled:
		return out, "", &refusal{fmt.Sprintf("refused: job %s was canceled; stop working on it", in.JobID)}
	case !b.LeaseHeld:
		return out, "", &refusal{fmt.Sprintf("refused: worker %q holds no lease on job %s attempt %d (it expired and was retried, or it is another worker's); stop working on it",
			in.WorkerID, in.JobID, in.Attempt)}
	case b.Quiesced:
		return out, fmt.Sprintf("lease extended to %s; the job's scope is quiesced (%s): hold at your next step boundary and keep heartbeating",
			b.LeaseUntil.UTC().Format(time.RFC3339), sys.Reason), nil
	}
	return out, "lease extended to " + b.LeaseUntil.UTC().Format(time.RFC3339), nil
}

func (s *Server) settle(ctx context.Context, in AttemptArgs, outcome pulsetype.Outcome, msg string, after time.Duration) (SettleResult, string, error) {
	ref, err := parseAttempt(in)
	if err != nil {
		return SettleResult{}, "", err
	}
	if msg != "" {
		msg = errtext.Sanitize(msg, pulsetype.MaxErrorBytes)
	}
	worker := s.leaseHolder(ctx, in.WorkerID)
	acks, err := s.deps.Queue.Report(ctx, worker, []pulsetype.Result{{Ref: ref, Outcome: outcome, Error: msg, Worker: worker, RetryAfter: after}})
	if err != nil {
		return SettleResult{}, "", err
	}
	var a pulsetype.Ack
	if len(acks) == 1 {
		a = acks[0]
	}
	var topics []string
	if a.Topic != "" {
		topics = []string{a.Topic}
	}
	sys, err := s.system(ctx, topics)
	if err != nil {
		return SettleResult{}, "", err
	}
	out := SettleResult{Accepted: a.Accepted, System: sys}
	if !a.Accepted {
		return out, "", &refusal{fmt.Sprintf("refused: the result of job %s attempt %d changed nothing: %s", in.JobID, in.Attempt, a.Reason)}
	}
	out.Status = string(a.Status)
	return out, fmt.Sprintf("job %s is %s", in.JobID, out.Status), nil
}

// system is the envelope for a call about topics (none: the global scope
// only).
func (s *Server) system(ctx context.Context, topics []string) (System, error) {
	st, err := s.deps.Queue.DispatchState(ctx)
	if err != nil {
		return System{}, err
	}
	view, _ := pausewire.WorkerView(&st, topics)
	out := System{Paused: view.GetPaused(), Version: view.GetVersion(), PausedScopes: make([]pulsehttp.ScopeState, len(view.GetPausedScopes()))}
	for i, sc := range view.GetPausedScopes() {
		out.PausedScopes[i] = httpapi.ScopeToJSON(sc)
	}
	if len(out.PausedScopes) > 0 {
		out.Mode, out.Reason = out.PausedScopes[0].Mode, out.PausedScopes[0].Reason
	}
	return out, nil
}

// leaseHolder is what the caller's leases are held as, as a gateway holds
// them: its authenticated identity and worker id (ADR-0012), or the worker
// id alone in open mode.
func (s *Server) leaseHolder(ctx context.Context, workerID string) string {
	if s.opts.Open {
		return workerID
	}
	return auth.LeaseHolder(auth.IdentityFrom(ctx).Name, workerID)
}

func validateWorkerID(id string) error {
	if id == "" {
		return apierr.Invalid("worker_id", "is required")
	}
	if len(id) > pulsetype.MaxWorkerIDBytes {
		return apierr.Invalid("worker_id", "is %d bytes; the limit is %d", len(id), pulsetype.MaxWorkerIDBytes)
	}
	return storable.Text("worker_id", id)
}

func parseAttempt(in AttemptArgs) (pulsetype.AttemptRef, error) {
	if err := validateWorkerID(in.WorkerID); err != nil {
		return pulsetype.AttemptRef{}, err
	}
	id, err := uuid.Parse(in.JobID)
	if err != nil {
		return pulsetype.AttemptRef{}, apierr.Invalid("job_id", "%q is not a job id (a UUID)", in.JobID)
	}
	if in.Attempt < 1 {
		return pulsetype.AttemptRef{}, apierr.Invalid("attempt", "is %d; attempts start at 1", in.Attempt)
	}
	return pulsetype.AttemptRef{ID: id, Attempt: in.Attempt}, nil
}

// leaseOf reads lease_seconds: 0 is the default.
func leaseOf(seconds int) (time.Duration, error) {
	if seconds == 0 {
		return LeaseDefault, nil
	}
	d := time.Duration(seconds) * time.Second
	if seconds < 0 || d < LeaseMin || d > LeaseMax {
		return 0, apierr.Invalid("lease_seconds", "is %d; it must be between %d and %d (or omitted: %d)",
			seconds, int(LeaseMin.Seconds()), int(LeaseMax.Seconds()), int(LeaseDefault.Seconds()))
	}
	return d, nil
}
