package pulse

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// PauseMode says what a pause does to jobs already running.
type PauseMode string

// The pause modes (docs/pause.md).
const (
	// PauseDrain stops new work; running jobs run to completion.
	PauseDrain PauseMode = "drain"
	// PauseQuiesce stops new work and makes running jobs' [Checkpoint]
	// calls hold until resume.
	PauseQuiesce PauseMode = "quiesce"
)

// PauseRequest describes a pause for [Client.PauseDispatch].
type PauseRequest struct {
	// Reason is required (at most 500 characters) and shown to everyone
	// who asks why nothing runs.
	Reason string
	// Mode is PauseDrain when empty.
	Mode PauseMode
	// Topic pauses one topic; empty pauses all dispatch.
	Topic string
	// For or Until (at most one) make the pause resume by itself.
	For   time.Duration
	Until time.Time
}

// ScopeState is one pause scope ("*" for all dispatch, or a topic) as
// control-api reports it.
type ScopeState struct {
	Scope  string
	Paused bool
	Mode   PauseMode
	Reason string
	// Actor made the latest change ("system" for an automatic resume).
	Actor string
	// PausedAt is when the scope was last paused (kept after resume).
	PausedAt  time.Time
	Until     time.Time
	UpdatedAt time.Time
	Version   int64
	// Queued, Running and Drained (Running == 0) are filled by
	// [Client.DispatchStatus].
	Queued, Running int64
	Drained         bool
}

// PauseDispatch pauses dispatch (or one topic). It returns once the pause
// has committed: from then on no gateway starts a job of that scope. It
// reports whether anything changed (false when the same pause was already
// in place). Only operator credentials may pause.
func (c *Client) PauseDispatch(ctx context.Context, req PauseRequest) (ScopeState, bool, error) {
	in := &pulsev1.PauseDispatchRequest{Reason: req.Reason, Topic: req.Topic}
	switch req.Mode {
	case "", PauseDrain:
	case PauseQuiesce:
		in.Mode = pulsev1.PauseMode_PAUSE_MODE_QUIESCE
	default:
		return ScopeState{}, false, fmt.Errorf("pulse: unknown pause mode %q", req.Mode)
	}
	if req.For != 0 {
		in.PauseFor = durationpb.New(req.For)
	}
	if !req.Until.IsZero() {
		in.Until = timestamppb.New(req.Until)
	}
	resp, err := pulsev1.NewDispatchControlServiceClient(c.conn).PauseDispatch(ctx, in)
	if err != nil {
		return ScopeState{}, false, fmt.Errorf("pulse: pause dispatch: %w", err)
	}
	return scopeFromProto(resp.GetState()), resp.GetChanged(), nil
}

// ResumeDispatch resumes dispatch (or one topic, when topic is not empty);
// the backlog is worked off in priority order. It reports whether anything
// changed.
func (c *Client) ResumeDispatch(ctx context.Context, topic string) (ScopeState, bool, error) {
	resp, err := pulsev1.NewDispatchControlServiceClient(c.conn).ResumeDispatch(ctx, &pulsev1.ResumeDispatchRequest{Topic: topic})
	if err != nil {
		return ScopeState{}, false, fmt.Errorf("pulse: resume dispatch: %w", err)
	}
	return scopeFromProto(resp.GetState()), resp.GetChanged(), nil
}

// DispatchStatus returns every pause scope, the global one first, with its
// queued and running counts: a scope is safe to upgrade once Drained.
func (c *Client) DispatchStatus(ctx context.Context) ([]ScopeState, error) {
	resp, err := pulsev1.NewDispatchControlServiceClient(c.conn).GetDispatchState(ctx, &pulsev1.GetDispatchStateRequest{})
	if err != nil {
		return nil, fmt.Errorf("pulse: dispatch status: %w", err)
	}
	out := make([]ScopeState, len(resp.GetScopes()))
	for i, s := range resp.GetScopes() {
		out[i] = scopeFromProto(s.GetState())
		out[i].Queued, out[i].Running, out[i].Drained = s.GetQueued(), s.GetRunning(), s.GetDrained()
	}
	return out, nil
}

func scopeFromProto(s *pulsev1.ScopeState) ScopeState {
	return ScopeState{
		Scope: s.GetScope(), Paused: s.GetPaused(), Mode: PauseMode(modeName(s.GetMode())),
		Reason: s.GetReason(), Actor: s.GetActor(),
		PausedAt: timeOf(s.GetPausedAt()), Until: timeOf(s.GetUntil()), UpdatedAt: timeOf(s.GetUpdatedAt()),
		Version: s.GetVersion(),
	}
}
