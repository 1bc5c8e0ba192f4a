// Package background is the one lifecycle of a goroutine that runs from
// Start to Stop: periodic loops (loop), the LISTEN connection (pglisten)
// and the runtime's Go components (service) share it.
package background

import (
	"context"
	"sync"
)

// Runner runs one function in its own goroutine. The zero value is ready.
type Runner struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs fn in a goroutine until Stop, with a context that keeps ctx's
// values but not its end (ctx is a start-up context). It reports false,
// and does nothing, when the runner was started before.
func (r *Runner) Start(ctx context.Context, fn func(ctx context.Context)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return false
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		fn(runCtx)
	}()
	return true
}

// Stop ends fn's context and waits for fn to return, or for ctx to end
// (then it returns ctx's error). Stopping a runner never started, or
// stopped before, returns at once.
func (r *Runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
