package api

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/pulsequeue/pulse/pkg/errtext"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// ReportBatcher folds concurrent ReportResult calls — from any number of
// workers — into one report statement. It batches naturally: a call that
// arrives while no flush runs goes at once; calls that arrive during a
// flush share the next one. Every result keeps its own worker fence.
//
// One result must not fail the others folded with it: when Postgres
// refuses the statement's data (jobstore.IsDataError), the batch is
// bisected (jobstore.Isolate) until each refused result fails alone with
// its own error and every other result settles. The happy path is one
// statement.
type ReportBatcher struct {
	store    Store
	maxBatch int

	mu      sync.Mutex
	queue   []*reportCall
	queued  int
	running int
	maxRun  int
}

type reportCall struct {
	ctx     context.Context
	results []pulsetype.Result
	acks    []pulsetype.Ack
	refused []error // per result when some were refused alone, else nil
	err     error
	done    chan struct{}
}

// NewReportBatcher builds a batcher with at most flushers statements in
// flight and about maxBatch results per statement.
func NewReportBatcher(store Store, flushers, maxBatch int) *ReportBatcher {
	return &ReportBatcher{store: store, maxBatch: maxBatch, maxRun: flushers}
}

// Report settles results (each carrying its Worker) and returns their acks
// in order. refused is nil unless Postgres refused some results on their
// own data; then refused[i] is result i's error (its ack is zero) and every
// result with a nil entry was settled or fenced as usual. err is a failure
// of the statement itself (the database unreachable): nothing is known
// settled and the caller retries, which the fence makes safe.
func (b *ReportBatcher) Report(ctx context.Context, results []pulsetype.Result) (acks []pulsetype.Ack, refused []error, err error) {
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
		return c.acks, c.refused, c.err
	case <-ctx.Done():
		// The results may still be settled by the flush already running;
		// the caller (a worker) retries, and the fence makes a repeat safe.
		return nil, nil, ctx.Err()
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
		all := make([]pulsetype.Result, 0, n)
		for _, c := range calls {
			all = append(all, c.results...)
		}
		// Detached from any one caller: a caller that gives up must not
		// cancel the others' results.
		ctx := context.WithoutCancel(calls[0].ctx)
		acks, errs := jobstore.Isolate(all, func(batch []pulsetype.Result) ([]pulsetype.Ack, error) {
			return b.store.Report(ctx, "", batch)
		})
		off := 0
		for _, c := range calls {
			end := off + len(c.results)
			c.acks = acks[off:end]
			if errs != nil {
				c.refused, c.err = splitErrors(errs[off:end])
				if c.err != nil {
					c.acks, c.refused = nil, nil
				}
			}
			off = end
			close(c.done)
		}
	}
}

// splitErrors sorts one call's share of Isolate's errors: data errors are
// its results' own (refused, per result); any other error failed the
// statement itself and fails the whole call (err).
func splitErrors(errs []error) (refused []error, err error) {
	for _, e := range errs {
		if e == nil {
			continue
		}
		if !jobstore.IsDataError(e) {
			return nil, e
		}
		refused = errs
	}
	return refused, nil
}

// refusedAck answers a result Postgres refused on its own data (after the
// batch was bisected): INVALID_ARGUMENT with the database's reason. Nothing
// was written for it; the job stays leased and, unless a later report
// settles it, the reaper retries it when the lease lapses.
func (s *DispatchService) refusedAck(r pulsetype.Result, err error) *pulsev1.ResultAck {
	s.logger.Warn("result refused by the database; the other results of its statement settled",
		"worker_id", r.Worker, "job_id", r.Ref.ID, "attempt", r.Ref.Attempt, "error", err)
	return &pulsev1.ResultAck{
		JobId: r.Ref.ID.String(), Attempt: r.Ref.Attempt, Code: int32(codes.InvalidArgument),
		Message: errtext.Sanitize("the database refused this result: "+err.Error(), MaxErrorBytes),
	}
}

// settledAcks drops the acks of refused results (nil refused: all of them
// are answers), for the observer.
func settledAcks(acks []pulsetype.Ack, refused []error) []pulsetype.Ack {
	if refused == nil {
		return acks
	}
	out := make([]pulsetype.Ack, 0, len(acks))
	for i, a := range acks {
		if refused[i] == nil {
			out = append(out, a)
		}
	}
	return out
}
