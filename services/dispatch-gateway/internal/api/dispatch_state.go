package api

import (
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/pausewire"
)

// dispatchState is the pause state that matters to topics, from the gate,
// and a key naming its content; ok is false without a primed gate.
func (s *DispatchService) dispatchState(topics []string) (view *pulsev1.DispatchState, key string, ok bool) {
	if s.cfg.Pause == nil {
		return nil, "", false
	}
	st := s.cfg.Pause.State()
	if st == nil {
		return nil, "", false
	}
	view, key = pausewire.WorkerView(st, topics)
	return view, key, true
}

// pauseChanged is closed at the gate's next change; without a gate it
// never is.
func (s *DispatchService) pauseChanged() <-chan struct{} {
	if s.cfg.Pause == nil {
		return nil
	}
	return s.cfg.Pause.Changed()
}
