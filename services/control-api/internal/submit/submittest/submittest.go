// Package submittest holds what tests of the submit coalescer and of the
// APIs in front of it share: a Gate that holds every INSERT until it is
// opened, so a test can line submits up into one batch without relying on
// timing, and Wait, a bounded wait on the coalescer's counters.
package submittest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit"
)

// Gate is a submit.Inserter that holds every INSERT until Open.
type Gate struct {
	inner  submit.Inserter
	opened chan struct{}
	once   sync.Once
}

// NewGate returns a shut gate; pass its Wrap where a submit.Inserter is
// wrapped, or wrap the store with it yourself.
func NewGate() *Gate { return &Gate{opened: make(chan struct{})} }

// Wrap makes inner the store the gate inserts through, and returns the
// gate.
func (g *Gate) Wrap(inner submit.Inserter) submit.Inserter {
	g.inner = inner
	return g
}

// Open lets every INSERT through, now and from now on.
func (g *Gate) Open() { g.once.Do(func() { close(g.opened) }) }

// InsertEach waits for Open, then inserts. If ctx ends first it fails
// every job with ctx's error, as the database does with a canceled query.
func (g *Gate) InsertEach(ctx context.Context, jobs []pulsetype.NewJob) ([]pulsetype.Inserted, []error) {
	select {
	case <-g.opened:
		return g.inner.InsertEach(ctx, jobs)
	case <-ctx.Done():
		errs := make([]error, len(jobs))
		for i := range errs {
			errs[i] = fmt.Errorf("insert jobs: %w", ctx.Err())
		}
		return make([]pulsetype.Inserted, len(jobs)), errs
	}
}

// Wait polls c's counters until cond holds, and fails the test naming
// what it waited for if they do not get there within proctest.Patience.
func Wait(t testing.TB, c *submit.Coalescer, what string, cond func(submit.Stats) bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(proctest.Patience)
	for {
		s := c.Stats()
		if cond(s) {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waited %s for %s; the coalescer's stats are %+v", proctest.Patience, what, s)
		}
	}
}

// Burst runs send(i) for every i below n, each in its own goroutine,
// while gate holds the INSERTs; once queued of them wait in c's queue it
// opens gate, and returns when every submit has returned. The submits a
// validation refuses never queue: queued counts the others.
func Burst(t testing.TB, c *submit.Coalescer, gate *Gate, n, queued int, send func(i int)) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { send(i) })
	}
	Wait(t, c, fmt.Sprintf("%d submits queued", queued), func(s submit.Stats) bool { return s.Queued == queued })
	gate.Open()
	wg.Wait()
}
