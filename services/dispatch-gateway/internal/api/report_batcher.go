package api

import (
	"context"
	"sync"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// ReportBatcher folds concurrent ReportResult calls — from any number of
// workers — into one report statement. It batches naturally: a call that
// arrives while no flush runs goes at once; calls that arrive during a
// flush share the next one. Every result keeps its own worker fence.
type ReportBatcher struct {
	store    Store
	backoff  jobstore.Backoff
	maxBatch int

	mu      sync.Mutex
	queue   []*reportCall
	queued  int
	running int
	maxRun  int
}

type reportCall struct {
	ctx     context.Context
	results []jobstore.Result
	acks    []jobstore.Ack
	err     error
	done    chan struct{}
}

// NewReportBatcher builds a batcher with at most flushers statements in
// flight and about maxBatch results per statement.
func NewReportBatcher(store Store, backoff jobstore.Backoff, flushers, maxBatch int) *ReportBatcher {
	return &ReportBatcher{store: store, backoff: backoff, maxBatch: maxBatch, maxRun: flushers}
}

// Report settles results (each carrying its Worker) and returns their acks
// in order.
func (b *ReportBatcher) Report(ctx context.Context, results []jobstore.Result) ([]jobstore.Ack, error) {
	c := &reportCall{ctx: ctx, results: results, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	b.queued += len(results)
	start := b.running < b.maxRun
	if start {
		b.running++
	}
	b.mu.Unlock()
	if start {
		go b.flushLoop()
	}
	select {
	case <-c.done:
		return c.acks, c.err
	case <-ctx.Done():
		// The results may still be settled by the flush already running;
		// the caller (a worker) retries, and the fence makes a repeat safe.
		return nil, ctx.Err()
	}
}

// flushLoop settles queued calls until the queue is empty.
func (b *ReportBatcher) flushLoop() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		var calls []*reportCall
		n := 0
		for len(b.queue) > 0 && (n == 0 || n+len(b.queue[0].results) <= b.maxBatch) {
			c := b.queue[0]
			b.queue = b.queue[1:]
			if c.ctx.Err() != nil {
				c.err = c.ctx.Err()
				close(c.done)
				continue
			}
			calls = append(calls, c)
			n += len(c.results)
		}
		b.queued -= n
		b.mu.Unlock()
		if len(calls) == 0 {
			continue
		}
		all := make([]jobstore.Result, 0, n)
		for _, c := range calls {
			all = append(all, c.results...)
		}
		// Detached from any one caller: a caller that gives up must not
		// cancel the others' results.
		acks, err := b.store.Report(context.WithoutCancel(calls[0].ctx), "", all, b.backoff)
		off := 0
		for _, c := range calls {
			if err != nil {
				c.err = err
			} else {
				c.acks = acks[off : off+len(c.results)]
			}
			off += len(c.results)
			close(c.done)
		}
	}
}
