package pulse

import (
	"context"
	"log/slog"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// heartbeater renews the leases of every held attempt with one Heartbeat RPC
// per interval, and stops handlers whose lease is gone: the gateway says so
// (lost or canceled), or no renewal succeeded for a whole lease TTL, after
// which the gateway has certainly let the lease expire.
type heartbeater struct {
	pool     *gatewayPool
	terms    *leaseTerms
	running  *runningJobs
	dispatch *dispatchWatch
	workerID string
	log      *slog.Logger
}

func newHeartbeater(pool *gatewayPool, terms *leaseTerms, running *runningJobs, dispatch *dispatchWatch, workerID string, log *slog.Logger) *heartbeater {
	return &heartbeater{
		pool:     pool,
		terms:    terms,
		running:  running,
		dispatch: dispatch,
		workerID: workerID,
		log:      log.With(logKeyComponent, "heartbeater"),
	}
}

// run heartbeats until ctx is done. The interval is re-read after every
// beat and whenever a gateway announces new terms.
func (h *heartbeater) run(ctx context.Context) {
	timer := time.NewTimer(h.terms.heartbeatInterval())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.terms.changed:
			timer.Reset(h.terms.heartbeatInterval())
			continue
		case <-h.dispatch.beatNow: // a pause or resume: refresh quiesce flags now
		case <-timer.C:
		}
		h.beat(ctx)
		timer.Reset(h.terms.heartbeatInterval())
	}
}

// beat sends one heartbeat for every held attempt and applies the answers.
func (h *heartbeater) beat(ctx context.Context) {
	refs := h.running.refs()
	if len(refs) == 0 {
		return
	}
	sentAt := time.Now()
	rpcCtx, cancel := context.WithTimeout(ctx, min(rpcTimeout, h.terms.leaseTTL()))
	resp, err := h.pool.current().Heartbeat(rpcCtx, &pulsev1.HeartbeatRequest{WorkerId: h.workerID, Jobs: refs})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		h.log.Warn("heartbeat failed", logKeyCount, len(refs), logKeyError, err)
	}
	h.apply(resp, sentAt)
	for _, k := range h.running.giveUpStale(time.Now(), h.terms.leaseTTL()) {
		h.log.Error("lease presumed lost: not renewed within the lease TTL",
			logKeyJobID, k.id, logKeyAttempt, k.attempt)
	}
}

// apply acts on the gateway's answer for each attempt; a nil response (the
// RPC failed) renews nothing.
func (h *heartbeater) apply(resp *pulsev1.HeartbeatResponse, sentAt time.Time) {
	current := h.dispatch.observe(resp.GetDispatchState(), false)
	for _, r := range resp.GetResults() {
		k := jobKey{id: r.GetJobId(), attempt: r.GetAttempt()}
		switch {
		case r.GetCanceled():
			if h.running.giveUp(k, ErrJobCanceled) {
				h.log.Info("job canceled, stopping its handler", logKeyJobID, k.id, logKeyAttempt, k.attempt)
			}
		case !r.GetLeaseHeld():
			if h.running.giveUp(k, ErrLeaseLost) {
				h.log.Warn("lease lost, stopping its handler", logKeyJobID, k.id, logKeyAttempt, k.attempt)
			}
		default:
			h.running.renewed(k, timeOf(r.GetLeaseUntil()), sentAt)
			if current { // an answer older than a pushed state must not undo it
				h.running.setQuiesced(k, r.GetQuiesced())
			}
		}
	}
}
