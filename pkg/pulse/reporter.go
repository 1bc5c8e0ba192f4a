package pulse

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

const (
	// reportConcurrency is how many ReportResult RPCs may be in flight; two
	// keeps the pipe busy while results pile up for the next batch.
	reportConcurrency = 2
	// reportRetryMin and reportRetryMax bound the backoff between attempts
	// to deliver a batch while a gateway is unreachable.
	reportRetryMin = 50 * time.Millisecond
	reportRetryMax = 2 * time.Second
	// rpcTimeout bounds each unary RPC so a hung connection cannot stall a
	// loop.
	rpcTimeout = 10 * time.Second
)

// pendingResult is a finished attempt waiting to be reported. settled is
// called exactly once when the result is acknowledged or given up on: it
// hands back the attempt's slot, or its place among the results settling
// behind freed slots (executor, ADR-0023), so what a worker holds leased
// stays bounded.
type pendingResult struct {
	result     *pulsev1.JobResult
	producedAt time.Time
	span       trace.SpanContext // the attempt's process span, linked from settle
	settled    func()
}

// reporter sends handler results to the gateway in batches. It batches
// naturally, with no linger: it blocks for the first result, takes whatever
// else is already queued (up to maxBatch) and sends it, with at most
// reportConcurrency RPCs in flight, so a lone result goes out at once and a
// burst shares RPCs.
type reporter struct {
	pool     *gatewayPool
	terms    *leaseTerms
	workerID string
	maxBatch int
	log      *slog.Logger

	mu      sync.Mutex
	queue   []pendingResult
	closing bool // stop requested: flush the queue, then exit
	closed  bool // loop exited: later results are dropped
	wake    chan struct{}
	stopped chan struct{} // closed by stop
}

func newReporter(pool *gatewayPool, terms *leaseTerms, workerID string, maxBatch int, log *slog.Logger) *reporter {
	return &reporter{
		pool:     pool,
		terms:    terms,
		workerID: workerID,
		maxBatch: maxBatch,
		log:      log.With(logKeyComponent, "reporter"),
		wake:     make(chan struct{}, 1),
		stopped:  make(chan struct{}),
	}
}

// submit queues a result; it never blocks, so a slow gateway does not hold
// up handlers.
func (r *reporter) submit(res *pulsev1.JobResult, span trace.SpanContext, settled func()) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		settled()
		r.log.ErrorContext(trace.ContextWithSpanContext(context.Background(), span), "result produced after shutdown, dropped; the job will be retried after its lease expires",
			logKeyJobID, res.GetJobId(), logKeyAttempt, res.GetAttempt())
		return
	}
	r.queue = append(r.queue, pendingResult{result: res, producedAt: time.Now(), span: span, settled: settled})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// stop asks run to send everything queued and return.
func (r *reporter) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closing {
		r.closing = true
		close(r.stopped)
	}
}

// run reports results until stop is called and the queue is empty. ctx
// bounds everything, including the final flush: when it is done, unsent
// results are dropped.
func (r *reporter) run(ctx context.Context) {
	tokens := make(chan struct{}, reportConcurrency)
	var sends sync.WaitGroup
	defer sends.Wait()
	for {
		select {
		case tokens <- struct{}{}:
		case <-ctx.Done():
			r.dropQueued("worker stopped before results could be reported")
			return
		}
		batch, ok := r.nextBatch(ctx)
		if !ok {
			return
		}
		sends.Add(1)
		go func() {
			defer sends.Done()
			defer func() { <-tokens }()
			r.send(ctx, batch)
		}()
	}
}

// batchLen is how many queued results the next batch takes: at most
// maxBatch, and no more than fit in pulsetype.MaxReportBatchBytes of
// results and error texts (at least one), so a batch of large results
// still fits one gRPC message.
func batchLen(queue []pendingResult, maxBatch int) int {
	n := min(len(queue), maxBatch)
	size := 0
	for i := range n {
		size += len(queue[i].result.GetResult()) + len(queue[i].result.GetError())
		if size > pulsetype.MaxReportBatchBytes && i > 0 {
			return i
		}
	}
	return n
}

// nextBatch blocks until results are queued and returns up to maxBatch of
// them. It returns false once stopping with nothing queued, or when ctx is
// done; from then on submit drops results.
func (r *reporter) nextBatch(ctx context.Context) ([]pendingResult, bool) {
	for {
		r.mu.Lock()
		if n := batchLen(r.queue, r.maxBatch); n > 0 {
			batch := r.queue[:n:n]
			r.queue = r.queue[n:]
			r.mu.Unlock()
			return batch, true
		}
		if r.closing {
			r.closed = true
			r.mu.Unlock()
			return nil, false
		}
		r.mu.Unlock()
		select {
		case <-r.wake:
		case <-r.stopped:
		case <-ctx.Done():
			r.dropQueued("worker stopped before results could be reported")
			return nil, false
		}
	}
}

// send delivers one batch, retrying on RPC failure until each result is a
// lease TTL old: by then the gateway has let the lease expire and the
// reaper owns the job, so the result no longer matters.
func (r *reporter) send(ctx context.Context, batch []pendingResult) {
	bo := backoff{min: reportRetryMin, max: reportRetryMax}
	for {
		req := &pulsev1.ReportResultRequest{WorkerId: r.workerID, Results: make([]*pulsev1.JobResult, len(batch))}
		for i, p := range batch {
			req.Results[i] = p.result
		}
		rpcCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
		started := time.Now()
		rpcCtx, span := startSettleSpan(rpcCtx, batch)
		resp, err := r.pool.current().ReportResult(rpcCtx, req)
		endSpan(span, err)
		recordBatchedSettles(batch, span, started, err)
		cancel()
		if err == nil {
			r.logRejected(batch, resp.GetAcks())
			settleAll(batch)
			return
		}
		if ctx.Err() != nil {
			r.logDropped(batch, "worker stopped before results could be reported", err)
			return
		}
		batch = r.dropExpired(batch, err)
		if len(batch) == 0 {
			return
		}
		delay := bo.next()
		r.log.Warn("report results failed, retrying", logKeyCount, len(batch), logKeyDelay, delay, logKeyError, err)
		if !sleepCtx(ctx, delay) {
			r.logDropped(batch, "worker stopped before results could be reported", err)
			return
		}
	}
}

// dropExpired removes, with an error log, results older than the lease TTL.
func (r *reporter) dropExpired(batch []pendingResult, err error) []pendingResult {
	ttl := r.terms.leaseTTL()
	now := time.Now()
	keep := batch[:0:0]
	var expired []pendingResult
	for _, p := range batch {
		if now.Sub(p.producedAt) > ttl {
			expired = append(expired, p)
		} else {
			keep = append(keep, p)
		}
	}
	r.logDropped(expired, "result not reported within the lease TTL; the reaper will retry the job", err)
	return keep
}

func (r *reporter) dropQueued(reason string) {
	r.mu.Lock()
	batch := r.queue
	r.queue = nil
	r.closed = true
	r.mu.Unlock()
	r.logDropped(batch, reason, nil)
}

// settleAll releases the slots of results that are done with.
func settleAll(batch []pendingResult) {
	for _, p := range batch {
		if p.settled != nil {
			p.settled()
		}
	}
}

// logDropped logs results given up on and releases their slots.
func (r *reporter) logDropped(batch []pendingResult, reason string, err error) {
	defer settleAll(batch)
	for _, p := range batch {
		attrs := []any{logKeyJobID, p.result.GetJobId(), logKeyAttempt, p.result.GetAttempt()}
		if err != nil {
			attrs = append(attrs, logKeyError, err)
		}
		r.log.ErrorContext(trace.ContextWithSpanContext(context.Background(), p.span), "result dropped: "+reason, attrs...)
	}
}

// logRejected warns about results the gateway refused. They are not
// retried: a refusal means the fence did not match (stale attempt,
// canceled, reaped), which no retry can change.
func (r *reporter) logRejected(batch []pendingResult, acks []*pulsev1.ResultAck) {
	for _, a := range acks {
		if codes.Code(a.GetCode()) != codes.OK {
			// The line carries the job's trace, from its result's span.
			var span trace.SpanContext
			for _, p := range batch {
				if p.result.GetJobId() == a.GetJobId() && p.result.GetAttempt() == a.GetAttempt() {
					span = p.span
					break
				}
			}
			r.log.WarnContext(trace.ContextWithSpanContext(context.Background(), span), "result rejected",
				logKeyJobID, a.GetJobId(), logKeyAttempt, a.GetAttempt(),
				logKeyCode, codes.Code(a.GetCode()).String(), logKeyError, a.GetMessage())
		}
	}
}
