package pulse

import (
	"context"
	"errors"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// errAbandoned: the attempt's lease lapsed before its handler started, so
// the handler never ran.
var errAbandoned = errors.New("pulse: attempt abandoned: its lease expired before the handler started")

// startable decides whether a held attempt may still start its handler. A
// worker stopped for longer than the lease (SIGSTOP, a frozen VM, a long GC
// or network stall) wakes up holding assignments whose leases the reaper
// may already have handed to someone else; running them would run the job
// twice at once.
//
// Two clocks judge freshness, and either one doubting it asks the gateway,
// which alone knows:
//   - the local monotonic time since the gateway last confirmed the lease
//     (at receipt, or by a heartbeat). Immune to clock skew, but blind to
//     time an assignment spent in socket buffers while this process was
//     stopped;
//   - the gateway's lease expiry, read on the local wall clock. It sees a
//     stop, but moves with clock skew; a worker whose clock is off by more
//     than a quarter of the TTL only pays a confirmation per start.
//
// A fresh attempt (the common case) costs two clock reads.
func (e *executor) startable(ctx context.Context, k jobKey) bool {
	if e.confirmLease == nil || e.leaseTTL == nil {
		return true
	}
	leaseUntil, renewedAt, ok := e.running.lease(k)
	if !ok {
		return false // given up: canceled or lost while it waited
	}
	ttl := e.leaseTTL()
	now := time.Now()
	if now.Sub(renewedAt) < ttl*3/4 && now.Before(leaseUntil.Add(-ttl/4)) {
		return true
	}
	return e.confirmLease(ctx, k)
}

// confirm asks a gateway, with a heartbeat for just this attempt, whether
// its lease is still held; a held lease is renewed by the asking. Any
// doubt (the call fails, the lease is gone, the job was canceled) is no.
func (h *heartbeater) confirm(ctx context.Context, k jobKey) bool {
	sentAt := time.Now()
	rpcCtx, cancel := context.WithTimeout(ctx, min(rpcTimeout, h.terms.leaseTTL()))
	resp, err := h.pool.current().Heartbeat(rpcCtx, &pulsev1.HeartbeatRequest{
		WorkerId: h.workerID, Jobs: []*pulsev1.JobRef{{JobId: k.id, Attempt: k.attempt}},
	})
	cancel()
	if err != nil {
		h.log.Warn("could not confirm a stale-looking lease; not starting the attempt", logKeyJobID, k.id, logKeyAttempt, k.attempt, logKeyError, err)
		return false
	}
	h.apply(resp, sentAt)
	for _, r := range resp.GetResults() {
		if r.GetJobId() == k.id && r.GetAttempt() == k.attempt {
			return r.GetLeaseHeld() && !r.GetCanceled()
		}
	}
	return false
}
