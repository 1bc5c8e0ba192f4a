package httpapi

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/pausewire"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// The conversions between the wire (pulse.v1) and the JSON shapes of
// pkg/pulsehttp, exported for the other JSON front of the same services,
// the MCP server (mcpserver): one spelling of a job, a wait, a scope, a
// topic and an event, whichever door an answer leaves by.

// JobToJSON is a job as the HTTP API shows it.
func JobToJSON(j *pulsev1.Job) pulsehttp.Job { return jobToJSON(j) }

// WaitToJSON is why a job is not running, as GET /v1/jobs/{id} says it;
// nil for a job that is running or finished.
func WaitToJSON(w *pulsev1.JobWait) *pulsehttp.Wait { return waitToJSON(w) }

// ScopeToJSON is one pause scope's state.
func ScopeToJSON(s *pulsev1.ScopeState) pulsehttp.ScopeState { return scopeToJSON(s) }

// TopicToJSON is one topic with its counts and limit.
func TopicToJSON(t *pulsev1.TopicInfo) pulsehttp.Topic { return topicToJSON(t) }

// BreakerToJSON is one topic's circuit breaker, as GET /v1/breakers says it.
func BreakerToJSON(b *pulsev1.TopicBreaker) pulsehttp.TopicBreaker { return breakerToJSON(b) }

// DispatchStateToJSON is GET /v1/dispatch's answer.
func DispatchStateToJSON(resp *pulsev1.GetDispatchStateResponse) pulsehttp.DispatchState {
	out := dispatchStateJSON{Version: resp.GetVersion(), Scopes: make([]scopeStatusJSON, len(resp.GetScopes()))}
	for i, s := range resp.GetScopes() {
		out.Scopes[i] = scopeStatusJSON{ScopeState: scopeToJSON(s.GetState()), Queued: s.GetQueued(), Running: s.GetRunning(), Drained: s.GetDrained()}
		if s.GetState().GetScope() == "*" {
			out.Paused = s.GetState().GetPaused()
		}
	}
	return out
}

// EventsToJSON is GET /v1/dispatch/events' answer.
func EventsToJSON(resp *pulsev1.ListDispatchEventsResponse) pulsehttp.EventList {
	out := eventsJSON{Events: make([]eventJSON, len(resp.GetEvents())), NextPageToken: resp.GetNextPageToken()}
	for i, e := range resp.GetEvents() {
		out.Events[i] = eventJSON{
			ID: e.GetId(), Scope: e.GetScope(), Action: strings.ToLower(strings.TrimPrefix(e.GetAction().String(), "DISPATCH_ACTION_")),
			Mode: pausewire.ModeName(e.GetMode()), Reason: e.GetReason(), Actor: e.GetActor(),
			At: api.TimeFromWire(e.GetAt()), Until: api.TimeFromWire(e.GetUntil()), Version: e.GetVersion(),
		}
	}
	return out
}

// PauseToWire reads a pause as POST /v1/dispatch/pause takes it: mode
// drain or quiesce (empty: drain), for a Go duration, until an RFC 3339
// time. Errors name the field; the service checks the rest (reason,
// topic, ranges, for and until together).
func PauseToWire(in pulsehttp.Pause) (*pulsev1.PauseDispatchRequest, error) {
	req := &pulsev1.PauseDispatchRequest{Reason: in.Reason, Topic: in.Topic}
	if in.Mode != "" {
		mode, ok := pausewire.ModeNamed(in.Mode)
		if !ok {
			return nil, apierr.Invalid("mode", "%q is not a pause mode; use drain (the default) or quiesce", in.Mode)
		}
		req.Mode = mode
	}
	if in.For != "" {
		dur, err := time.ParseDuration(in.For)
		if err != nil {
			return nil, apierr.Invalid("for", "%q is not a duration such as 30m or 2h", in.For)
		}
		req.PauseFor = durationpb.New(dur)
	}
	if in.Until != "" {
		t, err := time.Parse(time.RFC3339Nano, in.Until)
		if err != nil {
			return nil, apierr.Invalid("until", "%q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", in.Until)
		}
		req.Until = timestamppb.New(t)
	}
	return req, nil
}
