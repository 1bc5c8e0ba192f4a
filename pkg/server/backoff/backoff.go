// Package backoff is the one retry schedule of pulse's services: a delay
// that starts at Initial, grows by Multiplier per consecutive failure up to
// Max, and is shortened by up to Jitter of itself so replicas that failed
// together do not retry together. Reconnects, database waits, claim retries
// and failing loops all use it. (The SDK, pkg/pulse, keeps its own: it must
// not import pkg/server. A job's retry schedule, attempts² × unit, lives in
// the database.)
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is an exponential schedule with a cap and jitter. The zero
// Multiplier means 2.
type Policy struct {
	// Initial is the delay after the first failure.
	Initial time.Duration
	// Max caps every delay; a jittered delay never exceeds it.
	Max time.Duration
	// Multiplier is the growth per failure; 0 means 2.
	Multiplier float64
	// Jitter, from 0 to 1, is the largest fraction taken off each delay at
	// random: 0.2 waits between 80% and 100% of the computed delay. 0 is
	// exact, for schedules documented to the millisecond.
	Jitter float64
}

// Delay is the wait after the attempt-th consecutive failure (1 is the
// first): Initial × Multiplier^(attempt-1), at most Max, less the jitter.
func (p Policy) Delay(attempt int) time.Duration {
	d := p.base(attempt)
	if p.Jitter > 0 && d > 0 {
		j := min(p.Jitter, 1)
		d -= time.Duration(rand.Float64() * j * float64(d))
	}
	return d
}

func (p Policy) base(attempt int) time.Duration {
	mult := p.Multiplier
	if mult <= 1 {
		mult = 2
	}
	d := float64(p.Initial)
	limit := float64(p.Max)
	if p.Max <= 0 {
		limit = float64(p.Initial)
	}
	for i := 1; i < attempt && d < limit; i++ {
		d *= mult
	}
	return time.Duration(min(d, limit))
}

// Backoff counts consecutive failures against a Policy. The zero value of
// a Backoff holding a Policy is ready; it is not safe for concurrent use.
type Backoff struct {
	Policy
	failures int
}

// New returns a Backoff on p.
func New(p Policy) *Backoff { return &Backoff{Policy: p} }

// Next counts one more failure and returns how long to wait before trying
// again.
func (b *Backoff) Next() time.Duration {
	b.failures++
	return b.Delay(b.failures)
}

// Reset forgets the failures: the next delay is Initial again.
func (b *Backoff) Reset() { b.failures = 0 }

// Failures is the number of consecutive failures counted since the last
// Reset.
func (b *Backoff) Failures() int { return b.failures }

// Sleep waits d or until ctx is done, whichever is first, and returns
// ctx.Err() in the latter case.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
