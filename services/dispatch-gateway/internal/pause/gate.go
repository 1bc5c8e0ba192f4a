package pause

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// ErrNotPrimed is the gate's readiness error until the first read succeeds.
var ErrNotPrimed = errors.New("dispatch gate not primed: the pause state has not been read from the database")

// Gate holds the last dispatch_control state the gateway read. Reads are
// one atomic load. A nil *Gate reads as open (nothing paused), so a
// dispatcher wired without one behaves normally; a gate not yet primed
// reads as globally paused, because at boot nothing is known and guessing
// "open" could dispatch into the outage an operator paused for.
type Gate struct {
	state atomic.Pointer[jobstore.DispatchState]

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
}

// NewGate returns an unprimed gate.
func NewGate() *Gate {
	return &Gate{changed: make(chan struct{})}
}

// Primed reports whether the gate holds a state read from the database.
func (g *Gate) Primed() bool { return g != nil && g.state.Load() != nil }

// State returns the last state read, or nil before the gate is primed.
func (g *Gate) State() *jobstore.DispatchState {
	if g == nil {
		return nil
	}
	return g.state.Load()
}

// GloballyPaused reports whether the global scope is paused (or the gate
// is not primed yet). While it is, the dispatcher issues no claims.
func (g *Gate) GloballyPaused() bool {
	if g == nil {
		return false
	}
	st := g.state.Load()
	return st == nil || st.Scope(jobstore.GlobalScope).Paused
}

// Blocks reports whether no job of topics can be claimed: the global scope
// is paused, or every one of topics is. The dispatcher skips such a group's
// claim; the claim statement would find nothing anyway.
func (g *Gate) Blocks(topics []string) bool {
	if g == nil {
		return false
	}
	st := g.state.Load()
	if st == nil || st.Scope(jobstore.GlobalScope).Paused {
		return true
	}
	for _, t := range topics {
		if !st.Scope(t).Paused {
			return false
		}
	}
	return len(topics) > 0
}

// Changed returns a channel closed at the gate's next change, for streams
// that tell their workers.
func (g *Gate) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// ReadinessCheck is /readyz's check: ready once primed.
func (g *Gate) ReadinessCheck(context.Context) error {
	if !g.Primed() {
		return ErrNotPrimed
	}
	return nil
}

// set stores st. It reports the previous state and whether st is a change
// (any new version), waking everyone waiting on Changed if so.
func (g *Gate) set(st *jobstore.DispatchState) (prev *jobstore.DispatchState, changed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev = g.state.Load()
	if prev != nil && prev.Version == st.Version {
		return prev, false
	}
	g.state.Store(st)
	close(g.changed)
	g.changed = make(chan struct{})
	return prev, true
}
