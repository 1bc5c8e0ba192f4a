// Package clock is the time source of the reaper's loops: the real clock in
// production, a hand-driven one in tests, so a test decides when a tick
// happens instead of sleeping and hoping.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and paces loops.
type Clock interface {
	Now() time.Time
	NewTicker(d time.Duration) Ticker
}

// Ticker is the part of *time.Ticker a loop uses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the wall clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// Manual is a clock that moves only when a test calls Advance. Its tickers
// fire as time.Ticker's do: at most one pending tick, later ones dropped.
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*manualTicker
}

// NewManual returns a manual clock reading start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the clock's current reading.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// NewTicker returns a ticker that fires each time Advance crosses a
// multiple of d since its creation.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker interval")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &manualTicker{clock: m, every: d, next: m.now.Add(d), c: make(chan time.Time, 1)}
	m.tickers = append(m.tickers, t)
	return t
}

// Advance moves the clock forward by d and fires every ticker that came due.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	for _, t := range m.tickers {
		if t.stopped || t.next.After(m.now) {
			continue
		}
		for !t.next.After(m.now) {
			t.next = t.next.Add(t.every)
		}
		select {
		case t.c <- m.now:
		default:
		}
	}
}

type manualTicker struct {
	clock   *Manual
	every   time.Duration
	next    time.Time
	stopped bool
	c       chan time.Time
}

func (t *manualTicker) C() <-chan time.Time { return t.c }

func (t *manualTicker) Stop() {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	t.stopped = true
}
