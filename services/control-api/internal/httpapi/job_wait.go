package httpapi

import (
	"strings"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// jobWithWaitJSON is GET /v1/jobs/{id}: the job and, when it is PENDING or
// RETRYING, why it is not running.
type jobWithWaitJSON = pulsehttp.JobWithWait

// waitJSON says why a job waits: "paused" (by whom, since when, why,
// until when), "scheduled" / "retry_backoff" / "snoozed" (until not_before),
// "breaker_open" (its topic's circuit breaker paused it until not_before),
// "rate_limited" (its topic's rate limit has no room for its key until
// not_before), "concurrency_key_full" (its concurrency key has
// max_running_per_key running), "sequence_blocked" (blocked_by, a job of
// its sequence, is before it unfinished or runs),
// "no_worker" (no connected worker serves its topic; worker_last_seen says
// when one last did, null if never), or "queued" behind `ahead` jobs of its
// topic.
type waitJSON = pulsehttp.Wait

func waitToJSON(w *pulsev1.JobWait) *waitJSON {
	if w == nil {
		return nil
	}
	out := &waitJSON{
		Reason:       strings.ToLower(strings.TrimPrefix(w.GetReason().String(), "JOB_WAIT_REASON_")),
		NotBefore:    api.TimeFromWire(w.GetNotBefore()),
		Ahead:        w.GetAhead(),
		AheadAtLeast: w.GetAheadAtLeast(),
		BlockedBy:    w.GetBlockedBy(),

		MaxRunningPerKey: w.GetMaxRunningPerKey(),
	}
	if w.GetPausedBy() != nil {
		s := scopeToJSON(w.GetPausedBy())
		out.PausedBy = &s
	}
	if w.GetReason() == pulsev1.JobWaitReason_JOB_WAIT_REASON_NO_WORKER {
		out.WorkerLastSeen = &pulsehttp.LastSeen{At: api.TimeFromWire(w.GetWorkerLastSeen())}
	}
	return out
}
