package pulse

import "sync"

// slotLedger counts the jobs the worker holds and the slots freed since the
// gateway was last told. Opening a stream and freeing a slot both lock it,
// so every freed slot reaches the gateway exactly once: either as a Credit
// on the stream, or folded into the next stream's in_flight.
type slotLedger struct {
	mu     sync.Mutex
	held   int // assigned and not yet finished, across streams
	unsent int // finished since the last Open or Credit
	wake   chan struct{}
}

func newSlotLedger() *slotLedger {
	return &slotLedger{wake: make(chan struct{}, 1)}
}

// opened resets the unsent credits for a new stream and returns how many
// jobs are still held, which the Open message declares as in_flight.
func (l *slotLedger) opened() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unsent = 0
	return l.held
}

// assigned records a received job and returns how many are now held.
func (l *slotLedger) assigned() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held++
	return l.held
}

// finished records a freed slot and wakes the credit sender.
func (l *slotLedger) finished() {
	l.mu.Lock()
	l.held--
	l.unsent++
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// takeUnsent returns the slots to credit now and forgets them.
func (l *slotLedger) takeUnsent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.unsent
	l.unsent = 0
	return n
}
