// Package pausewire converts pause state between jobstore's types and the
// wire (pulse.v1 ScopeState, PauseMode, DispatchEvent), for the two
// services that speak it: dispatch-gateway tells workers, control-api tells
// operators.
package pausewire

import (
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// ModeToWire maps a stored mode to the wire enum.
func ModeToWire(m jobstore.PauseMode) pulsev1.PauseMode {
	switch m {
	case jobstore.PauseDrain:
		return pulsev1.PauseMode_PAUSE_MODE_DRAIN
	case jobstore.PauseQuiesce:
		return pulsev1.PauseMode_PAUSE_MODE_QUIESCE
	}
	return pulsev1.PauseMode_PAUSE_MODE_UNSPECIFIED
}

// ModeFromWire maps the wire enum to a stored mode: unset is drain; ok is
// false for a value no mode has.
func ModeFromWire(m pulsev1.PauseMode) (jobstore.PauseMode, bool) {
	switch m {
	case pulsev1.PauseMode_PAUSE_MODE_UNSPECIFIED, pulsev1.PauseMode_PAUSE_MODE_DRAIN:
		return jobstore.PauseDrain, true
	case pulsev1.PauseMode_PAUSE_MODE_QUIESCE:
		return jobstore.PauseQuiesce, true
	}
	return "", false
}

// ModeName is a wire mode as operators write it: "drain" (also for unset)
// or "quiesce"; "" for a value no mode has.
func ModeName(m pulsev1.PauseMode) string {
	mode, _ := ModeFromWire(m)
	return string(mode)
}

// ModeNamed maps an operator's "drain" or "quiesce" (any case) to the wire
// enum; ok is false for any other name.
func ModeNamed(name string) (pulsev1.PauseMode, bool) {
	m := jobstore.PauseMode(strings.ToLower(name))
	if !m.Valid() {
		return pulsev1.PauseMode_PAUSE_MODE_UNSPECIFIED, false
	}
	return ModeToWire(m), true
}

// ScopeToWire converts one dispatch_control row.
func ScopeToWire(s jobstore.ScopeState) *pulsev1.ScopeState {
	return &pulsev1.ScopeState{
		Scope:     s.Scope,
		Paused:    s.Paused,
		Mode:      ModeToWire(s.Mode),
		Reason:    s.Reason,
		Actor:     s.Actor,
		PausedAt:  timestampOrNil(s.PausedAt),
		Until:     timestampOrNil(s.Until),
		UpdatedAt: timestampOrNil(&s.UpdatedAt),
		Version:   s.Version,
	}
}

// EventToWire converts one control_events row.
func EventToWire(e jobstore.ControlEvent) *pulsev1.DispatchEvent {
	action := pulsev1.DispatchAction_DISPATCH_ACTION_PAUSE
	if e.Action == jobstore.ActionResume {
		action = pulsev1.DispatchAction_DISPATCH_ACTION_RESUME
	}
	return &pulsev1.DispatchEvent{
		Id:      e.ID,
		Scope:   e.Scope,
		Action:  action,
		Mode:    ModeToWire(e.Mode),
		Reason:  e.Reason,
		Actor:   e.Actor,
		At:      timestamppb.New(e.At),
		Until:   timestampOrNil(e.Until),
		Version: e.Version,
	}
}

// WorkerView is the DispatchState message for a worker of topics (or a
// heartbeat of jobs of topics): the paused scopes among the global scope
// and topics, and whether none of topics can be dispatched. The key names
// the view's content, so a stream can send it once per change.
func WorkerView(st *jobstore.DispatchState, topics []string) (view *pulsev1.DispatchState, key string) {
	view = &pulsev1.DispatchState{Version: st.Version}
	global := st.Scope(jobstore.GlobalScope)
	if global.Paused {
		view.PausedScopes = append(view.PausedScopes, ScopeToWire(global))
		key += viewKey(global)
	}
	blocked := 0
	seen := map[string]bool{}
	for _, t := range topics {
		if seen[t] {
			continue
		}
		seen[t] = true
		if s := st.Scope(t); s.Paused {
			blocked++
			view.PausedScopes = append(view.PausedScopes, ScopeToWire(s))
			key += viewKey(s)
		}
	}
	view.Paused = global.Paused || (len(seen) > 0 && blocked == len(seen))
	return view, key
}

// viewKey names one paused scope's change: any change to it draws a new
// version.
func viewKey(s jobstore.ScopeState) string {
	return s.Scope + "@" + strconv.FormatInt(s.Version, 10) + ";"
}

func timestampOrNil(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}
