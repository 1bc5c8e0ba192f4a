package pulse

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff yields delays that double from min up to max, optionally with
// jitter so many workers reconnecting at once do not arrive together.
type backoff struct {
	min, max time.Duration
	jitter   bool
	cur      time.Duration
}

// next returns the delay to wait before the next attempt.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	if !b.jitter {
		return b.cur
	}
	// Equal jitter: somewhere in [cur/2, cur].
	half := b.cur / 2
	return half + rand.N(half+1)
}

// reset starts the sequence again after a success.
func (b *backoff) reset() { b.cur = 0 }

// sleepCtx waits for d or until ctx is done, reporting whether the full
// delay elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
