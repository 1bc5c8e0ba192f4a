package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

// The operator tools' arguments and answers. Answers are the HTTP API's
// JSON shapes (pkg/pulsehttp), converted by the same functions.

// ScopeArg names a pause scope: a topic, or none for the global scope.
type ScopeArg struct {
	Topic string `json:"topic,omitempty" jsonschema:"a topic; omit it for the global scope (all dispatch)"`
}

// PauseArgs are dispatch.pause's arguments.
type PauseArgs struct {
	Reason string `json:"reason" jsonschema:"why dispatch is paused, for the audit log and every worker (at most 500 characters)"`
	Topic  string `json:"topic,omitempty" jsonschema:"pause this topic only; omit it to pause all dispatch"`
	Mode   string `json:"mode,omitempty" jsonschema:"drain (the default: running jobs run to completion) or quiesce (running jobs also hold at their next safe point)"`
	For    string `json:"for,omitempty" jsonschema:"resume automatically after this Go duration, such as 30m or 2h; not with until"`
	Until  string `json:"until,omitempty" jsonschema:"resume automatically at this RFC 3339 time; not with for"`
}

// DrainProgress is one scope's progress towards drained.
type DrainProgress struct {
	Scope   string `json:"scope" jsonschema:"* for the global scope, else the topic"`
	Paused  bool   `json:"paused"`
	Mode    string `json:"mode" jsonschema:"drain or quiesce (of the last pause, once resumed)"`
	Reason  string `json:"reason"`
	Queued  int64  `json:"queued" jsonschema:"jobs of the scope waiting to start (PENDING and RETRYING)"`
	Running int64  `json:"running" jsonschema:"jobs of the scope running"`
	Drained bool   `json:"drained" jsonschema:"paused and nothing of the scope runs: safe to upgrade"`
}

// EventsArgs page the pause audit log.
type EventsArgs struct {
	Limit     int32  `json:"limit,omitempty" jsonschema:"how many events, newest first (1 to 500, default 50)"`
	PageToken string `json:"page_token,omitempty" jsonschema:"next_page_token of the previous page"`
}

// JobArg names one job.
type JobArg struct {
	ID string `json:"id" jsonschema:"the job's id (a UUID)"`
}

// ListArgs filter a job listing.
type ListArgs struct {
	Topic       string          `json:"topic,omitempty" jsonschema:"only jobs of this topic"`
	Status      string          `json:"status,omitempty" jsonschema:"only jobs in this status: PENDING, RUNNING, RETRYING, COMPLETED, DEAD_LETTERED or CANCELED"`
	Args        json.RawMessage `json:"args,omitempty" jsonschema:"only jobs whose args contain this JSON object, such as {\"customer\":42}"`
	Limit       int32           `json:"limit,omitempty" jsonschema:"page size (1 to 500, default 50)"`
	PageToken   string          `json:"page_token,omitempty" jsonschema:"next_page_token of the previous page"`
	IncludeArgs bool            `json:"include_args,omitempty" jsonschema:"list each job with its args"`
}

// DeadLetterArgs filter the dead letters.
type DeadLetterArgs struct {
	Topic     string `json:"topic,omitempty" jsonschema:"only dead letters of this topic"`
	Limit     int32  `json:"limit,omitempty" jsonschema:"page size (1 to 500, default 50)"`
	PageToken string `json:"page_token,omitempty" jsonschema:"next_page_token of the previous page"`
}

// WhyNotRunning is jobs.why_not_running's answer.
type WhyNotRunning struct {
	ID          string          `json:"id"`
	Status      string          `json:"status"`
	Waiting     *pulsehttp.Wait `json:"waiting,omitempty" jsonschema:"why the job waits; absent when it runs or has finished"`
	Explanation string          `json:"explanation" jsonschema:"the answer in one sentence"`
}

// TopicArg names one topic.
type TopicArg struct {
	Topic string `json:"topic" jsonschema:"the topic"`
}

// LimitArgs set a topic's limit.
type LimitArgs struct {
	Topic      string `json:"topic" jsonschema:"the topic"`
	MaxRunning *int64 `json:"max_running" jsonschema:"the most jobs of the topic running at once across the fleet (0 to 1000000; 0 holds the topic), or null to clear the limit"`
}

// Empty takes no arguments.
type Empty struct{}

var (
	readOnly    = &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}
	destructive = func(idempotent bool) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: idempotent, OpenWorldHint: ptr(false)}
	}
	additive = func(idempotent bool) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: idempotent, OpenWorldHint: ptr(false)}
	}
	limitBound = bound{prop: "limit", min: 0, max: api.ListLimitMax}
)

func (s *Server) addOperatorTools() {
	tool(s, &mcp.Tool{Name: ToolDispatchStatus, Title: "Dispatch status", Annotations: readOnly,
		Description: "The pause state of every scope (global first, then every topic ever paused) with its queued and running jobs and whether it is drained."},
		func(ctx context.Context, _ Empty) (pulsehttp.DispatchState, string, error) {
			resp, err := s.deps.Dispatch.GetDispatchState(ctx, &pulsev1.GetDispatchStateRequest{})
			if err != nil {
				return pulsehttp.DispatchState{}, "", err
			}
			out := httpapi.DispatchStateToJSON(resp)
			var paused []string
			for _, sc := range out.Scopes {
				if sc.Paused {
					paused = append(paused, fmt.Sprintf("%s (%s: %s)", sc.Scope, sc.Mode, sc.Reason))
				}
			}
			if len(paused) == 0 {
				return out, fmt.Sprintf("dispatching; nothing is paused (version %d)", out.Version), nil
			}
			return out, fmt.Sprintf("paused: %s (version %d)", strings.Join(paused, ", "), out.Version), nil
		})

	tool(s, &mcp.Tool{Name: ToolDispatchPause, Title: "Pause dispatch", Annotations: destructive(true),
		Description: "Stop jobs from starting, everywhere, for all topics or one. Returns once the pause is committed: from then on no job of the scope starts on any gateway. Running jobs run to completion (drain) or also hold at their next safe point (quiesce). Operators only; audited."},
		func(ctx context.Context, in PauseArgs) (pulsehttp.ControlResult, string, error) {
			req, err := httpapi.PauseToWire(pulsehttp.Pause{Reason: in.Reason, Topic: in.Topic, Mode: in.Mode, For: in.For, Until: in.Until})
			if err != nil {
				return pulsehttp.ControlResult{}, "", err
			}
			resp, err := s.deps.Dispatch.Pause(ctx, req, "for")
			if err != nil {
				return pulsehttp.ControlResult{}, "", err
			}
			out := pulsehttp.ControlResult{Changed: resp.GetChanged(), State: httpapi.ScopeToJSON(resp.GetState())}
			return out, controlSummary("paused", out), nil
		})

	tool(s, &mcp.Tool{Name: ToolDispatchResume, Title: "Resume dispatch", Annotations: additive(true),
		Description: "Lift the pause of a scope (a topic, or the global scope when topic is omitted); its backlog is claimed in priority order. A topic paused on its own stays paused when the global scope resumes. Operators only; audited."},
		func(ctx context.Context, in ScopeArg) (pulsehttp.ControlResult, string, error) {
			resp, err := s.deps.Dispatch.ResumeDispatch(ctx, &pulsev1.ResumeDispatchRequest{Topic: in.Topic})
			if err != nil {
				return pulsehttp.ControlResult{}, "", err
			}
			out := pulsehttp.ControlResult{Changed: resp.GetChanged(), State: httpapi.ScopeToJSON(resp.GetState())}
			return out, controlSummary("resumed", out), nil
		})

	tool(s, &mcp.Tool{Name: ToolDispatchDrain, Title: "Drain progress", Annotations: readOnly,
		Description: "How far a paused scope is from drained: its queued and running jobs, and drained (paused and nothing running: safe to upgrade). Call it until drained is true."},
		func(ctx context.Context, in ScopeArg) (DrainProgress, string, error) {
			resp, err := s.deps.Dispatch.GetDispatchState(ctx, &pulsev1.GetDispatchStateRequest{})
			if err != nil {
				return DrainProgress{}, "", err
			}
			scope := "*"
			if in.Topic != "" {
				scope = in.Topic
			}
			out, found := DrainProgress{Scope: scope, Mode: "drain"}, false
			for _, sc := range httpapi.DispatchStateToJSON(resp).Scopes {
				if sc.Scope == scope {
					out, found = DrainProgress{Scope: scope, Paused: sc.Paused, Mode: sc.Mode, Reason: sc.Reason, Queued: sc.Queued, Running: sc.Running, Drained: sc.Drained}, true
				}
			}
			if !found {
				// A topic never paused has no scope row: its counts are the
				// topic's.
				ti, err := s.deps.Topics.GetTopic(ctx, in.Topic)
				if err != nil {
					return DrainProgress{}, "", err
				}
				out.Queued, out.Running = ti.GetPending()+ti.GetRetrying(), ti.GetRunning()
			}
			switch {
			case out.Drained:
				return out, fmt.Sprintf("%s is drained: paused, nothing running, %d queued", scope, out.Queued), nil
			case out.Paused:
				return out, fmt.Sprintf("%s is draining: %d still running, %d queued", scope, out.Running, out.Queued), nil
			}
			return out, fmt.Sprintf("%s is not paused, so it does not drain (%d running, %d queued)", scope, out.Running, out.Queued), nil
		})

	tool(s, &mcp.Tool{Name: ToolDispatchEvents, Title: "Pause audit log", Annotations: readOnly,
		Description: "Every pause and resume, newest first: scope, action, mode, reason, actor, time, expiry and version."},
		func(ctx context.Context, in EventsArgs) (pulsehttp.EventList, string, error) {
			resp, err := s.deps.Dispatch.ListDispatchEvents(ctx, &pulsev1.ListDispatchEventsRequest{Limit: in.Limit, PageToken: in.PageToken})
			if err != nil {
				return pulsehttp.EventList{}, "", err
			}
			out := httpapi.EventsToJSON(resp)
			if len(out.Events) == 0 {
				return out, "no pause or resume recorded", nil
			}
			e := out.Events[0]
			return out, fmt.Sprintf("%d events; the newest: %s of %s by %s", len(out.Events), e.Action, e.Scope, e.Actor), nil
		}, bound{prop: "limit", min: 0, max: api.EventsLimitMax})

	tool(s, &mcp.Tool{Name: ToolJobGet, Title: "Get a job", Annotations: readOnly,
		Description: "One job: its spec, status, attempts, error history, lease, and, when it is not running, why not (waiting)."},
		func(ctx context.Context, in JobArg) (pulsehttp.JobWithWait, string, error) {
			resp, err := s.deps.Jobs.GetJob(ctx, &pulsev1.GetJobRequest{Id: in.ID})
			if err != nil {
				return pulsehttp.JobWithWait{}, "", err
			}
			out := pulsehttp.JobWithWait{Job: httpapi.JobToJSON(resp.GetJob()), Waiting: httpapi.WaitToJSON(resp.GetWait())}
			return out, fmt.Sprintf("job %s (%s) is %s, attempt %d of %d", out.ID, out.Topic, out.Status, out.Attempts, out.MaxAttempts), nil
		})

	tool(s, &mcp.Tool{Name: ToolJobWhy, Title: "Why is a job not running", Annotations: readOnly,
		Description: "Why a job is not running: paused (and by whom), scheduled or in retry backoff (until when), no connected worker for its topic, or queued behind other jobs (how many)."},
		func(ctx context.Context, in JobArg) (WhyNotRunning, string, error) {
			resp, err := s.deps.Jobs.GetJob(ctx, &pulsev1.GetJobRequest{Id: in.ID})
			if err != nil {
				return WhyNotRunning{}, "", err
			}
			job := httpapi.JobToJSON(resp.GetJob())
			out := WhyNotRunning{ID: job.ID, Status: job.Status, Waiting: httpapi.WaitToJSON(resp.GetWait())}
			out.Explanation = explain(job, out.Waiting)
			return out, out.Explanation, nil
		})

	tool(s, &mcp.Tool{Name: ToolJobList, Title: "List and search jobs", Annotations: readOnly,
		Description: "Jobs, newest submitted first, filtered by topic, status and args containment; page with page_token."},
		func(ctx context.Context, in ListArgs) (pulsehttp.JobList, string, error) {
			q := api.JobQuery{Topic: in.Topic, Args: in.Args, Limit: in.Limit, PageToken: in.PageToken, IncludeArgs: in.IncludeArgs}
			if in.Status != "" {
				st, err := parseStatus(in.Status)
				if err != nil {
					return pulsehttp.JobList{}, "", err
				}
				q.Status = st
			}
			return s.list(ctx, q, "jobs")
		}, limitBound)

	tool(s, &mcp.Tool{Name: ToolDeadLetters, Title: "Dead letters", Annotations: readOnly,
		Description: "Dead-lettered jobs, latest death first, with their error history; page with page_token. jobs.retry brings one back."},
		func(ctx context.Context, in DeadLetterArgs) (pulsehttp.JobList, string, error) {
			return s.list(ctx, api.JobQuery{Topic: in.Topic, Status: pulsev1.JobStatus_JOB_STATUS_DEAD_LETTERED,
				Order: api.OrderFinished, Limit: in.Limit, PageToken: in.PageToken, IncludeArgs: true}, "dead letters")
		}, limitBound)

	tool(s, &mcp.Tool{Name: ToolJobRetry, Title: "Retry a job", Annotations: additive(false),
		Description: "Send a dead-lettered or canceled job back to PENDING with its attempts reset (its error history kept). Operators only."},
		func(ctx context.Context, in JobArg) (pulsehttp.Job, string, error) {
			resp, err := s.deps.Jobs.RetryJob(ctx, &pulsev1.RetryJobRequest{Id: in.ID})
			if err != nil {
				return pulsehttp.Job{}, "", err
			}
			out := httpapi.JobToJSON(resp.GetJob())
			return out, fmt.Sprintf("job %s is %s again", out.ID, out.Status), nil
		})

	tool(s, &mcp.Tool{Name: ToolJobCancel, Title: "Cancel a job", Annotations: destructive(false),
		Description: "Cancel a job that has not finished: it never runs again, and a running handler is told at its next heartbeat. Operators only."},
		func(ctx context.Context, in JobArg) (pulsehttp.Job, string, error) {
			resp, err := s.deps.Jobs.CancelJob(ctx, &pulsev1.CancelJobRequest{Id: in.ID})
			if err != nil {
				return pulsehttp.Job{}, "", err
			}
			out := httpapi.JobToJSON(resp.GetJob())
			return out, fmt.Sprintf("job %s is %s", out.ID, out.Status), nil
		})

	tool(s, &mcp.Tool{Name: ToolTopicList, Title: "Topics", Annotations: readOnly,
		Description: "Every topic with its pending, running, retrying and dead-lettered jobs, the last hour's throughput, whether it is paused, its connected workers and its limit (max_running)."},
		func(ctx context.Context, _ Empty) (pulsehttp.TopicList, string, error) {
			resp, err := s.deps.Topics.ListTopics(ctx, &pulsev1.ListTopicsRequest{})
			if err != nil {
				return pulsehttp.TopicList{}, "", err
			}
			out := pulsehttp.TopicList{Topics: make([]pulsehttp.Topic, len(resp.GetTopics()))}
			limited := 0
			for i, t := range resp.GetTopics() {
				out.Topics[i] = httpapi.TopicToJSON(t)
				if out.Topics[i].MaxRunning != nil {
					limited++
				}
			}
			return out, fmt.Sprintf("%d topics, %d with a limit", len(out.Topics), limited), nil
		})

	tool(s, &mcp.Tool{Name: ToolTopicGet, Title: "Topic", Annotations: readOnly,
		Description: "One topic with its counts, pause, connected workers and limit (max_running)."},
		func(ctx context.Context, in TopicArg) (pulsehttp.Topic, string, error) {
			ti, err := s.deps.Topics.GetTopic(ctx, in.Topic)
			if err != nil {
				return pulsehttp.Topic{}, "", err
			}
			out := httpapi.TopicToJSON(ti)
			limit := "no limit"
			if out.MaxRunning != nil {
				limit = fmt.Sprintf("limit %d running", *out.MaxRunning)
			}
			return out, fmt.Sprintf("%s: %d pending, %d running, %d dead-lettered, %s", out.Topic, out.Pending, out.Running, out.DeadLettered, limit), nil
		})
}

func (s *Server) addLimitTool() {
	tool(s, &mcp.Tool{Name: ToolTopicSetLimit, Title: "Limit a topic", Annotations: destructive(true),
		Description: "Set how many jobs of a topic may run at once across the fleet (max_running; 0 holds the topic like a pause), or clear the limit with null. Enforced in the claim on every gateway. Operators only; recorded with the actor."},
		func(ctx context.Context, in LimitArgs) (pulsehttp.Topic, string, error) {
			ti, err := s.deps.Topics.SetLimit(ctx, in.Topic, in.MaxRunning)
			if err != nil {
				return pulsehttp.Topic{}, "", err
			}
			out := httpapi.TopicToJSON(ti)
			if out.MaxRunning == nil {
				return out, out.Topic + " has no limit", nil
			}
			return out, fmt.Sprintf("%s runs at most %d jobs at once (%d running now)", out.Topic, *out.MaxRunning, out.Running), nil
		}, bound{prop: "max_running", min: 0, max: pulsetype.MaxTopicLimit})
}

func (s *Server) list(ctx context.Context, q api.JobQuery, what string) (pulsehttp.JobList, string, error) {
	resp, err := s.deps.Jobs.SearchJobs(ctx, q)
	if err != nil {
		return pulsehttp.JobList{}, "", err
	}
	out := pulsehttp.JobList{Jobs: make([]pulsehttp.Job, len(resp.GetJobs())), NextPageToken: resp.GetNextPageToken()}
	for i, j := range resp.GetJobs() {
		out.Jobs[i] = httpapi.JobToJSON(j)
		if !q.IncludeArgs {
			out.Jobs[i].Args = nil
		}
	}
	more := ""
	if out.NextPageToken != "" {
		more = "; more with page_token"
	}
	return out, fmt.Sprintf("%d %s%s", len(out.Jobs), what, more), nil
}

func parseStatus(s string) (pulsev1.JobStatus, error) {
	name := strings.TrimPrefix(strings.ToUpper(s), "JOB_STATUS_")
	if v, ok := pulsev1.JobStatus_value["JOB_STATUS_"+name]; ok && v != 0 {
		return pulsev1.JobStatus(v), nil
	}
	return 0, apierr.Invalid("status", "%q is not one of PENDING, RUNNING, RETRYING, COMPLETED, DEAD_LETTERED, CANCELED", s)
}

func controlSummary(verb string, r pulsehttp.ControlResult) string {
	scope := "all dispatch"
	if r.State.Scope != "*" {
		scope = "topic " + r.State.Scope
	}
	if !r.Changed {
		return fmt.Sprintf("%s was already %s; nothing changed (version %d)", scope, verb, r.State.Version)
	}
	if r.State.Paused {
		return fmt.Sprintf("%s %s (%s: %s), version %d", scope, verb, r.State.Mode, r.State.Reason, r.State.Version)
	}
	return fmt.Sprintf("%s %s, version %d", scope, verb, r.State.Version)
}

// explain says in one sentence why a job is not running.
func explain(job pulsehttp.Job, w *pulsehttp.Wait) string {
	if w == nil {
		switch job.Status {
		case "RUNNING":
			return fmt.Sprintf("job %s is running (attempt %d) on %s", job.ID, job.Attempts, job.LockedBy)
		default:
			return fmt.Sprintf("job %s has finished: %s", job.ID, job.Status)
		}
	}
	switch w.Reason {
	case "paused":
		if w.PausedBy != nil {
			scope := "all dispatch"
			if w.PausedBy.Scope != "*" {
				scope = "topic " + w.PausedBy.Scope
			}
			return fmt.Sprintf("job %s waits because %s is paused by %s: %s", job.ID, scope, w.PausedBy.Actor, w.PausedBy.Reason)
		}
		return fmt.Sprintf("job %s waits because dispatch is paused", job.ID)
	case "breaker_open":
		reason := ""
		if w.PausedBy != nil {
			reason = ": " + w.PausedBy.Reason
		}
		when := "after its cooldown"
		if w.NotBefore != nil {
			when = "at " + w.NotBefore.UTC().Format("2006-01-02T15:04:05Z")
		}
		return fmt.Sprintf("job %s waits because the circuit breaker of topic %s is open%s; it lets a trial through %s", job.ID, job.Topic, reason, when)
	case "rate_limited":
		when := "when its window frees a start"
		if w.NotBefore != nil {
			when = "at " + w.NotBefore.UTC().Format("2006-01-02T15:04:05Z")
		}
		return fmt.Sprintf("job %s waits because topic %s is at its rate limit for the job's key; it may start %s", job.ID, job.Topic, when)
	case "concurrency_key_full":
		return fmt.Sprintf("job %s waits because its concurrency key has %d jobs of topic %s running, the topic's cap per key", job.ID, w.MaxRunningPerKey, job.Topic)
	case "sequence_blocked":
		return fmt.Sprintf("job %s waits for job %s of its sequence in topic %s to finish", job.ID, w.BlockedBy, job.Topic)
	case "scheduled", "retry_backoff", "snoozed":
		when := "later"
		if w.NotBefore != nil {
			when = "at " + w.NotBefore.UTC().Format("2006-01-02T15:04:05Z")
		}
		return fmt.Sprintf("job %s is not due yet (%s): it becomes claimable %s", job.ID, w.Reason, when)
	case "no_worker":
		return fmt.Sprintf("job %s waits because no connected worker serves topic %s", job.ID, job.Topic)
	case "queued":
		atLeast := ""
		if w.AheadAtLeast {
			atLeast = "at least "
		}
		return fmt.Sprintf("job %s is due and queued; %s%d jobs of its topic are claimed before it", job.ID, atLeast, w.Ahead)
	}
	return fmt.Sprintf("job %s waits: %s", job.ID, w.Reason)
}
