package httpapi

import (
	"strings"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// jobWithWaitJSON is GET /v1/jobs/{id}: the job and, when it is PENDING or
// RETRYING, why it is not running.
type jobWithWaitJSON struct {
	jobJSON
	Waiting *waitJSON `json:"waiting,omitempty"`
}

// waitJSON says why a job waits: "paused" (by whom, since when, why,
// until when), "scheduled" / "retry_backoff" (until not_before), or
// "queued" behind `ahead` jobs of its topic.
type waitJSON struct {
	Reason       string     `json:"reason"`
	PausedBy     *scopeJSON `json:"paused_by,omitempty"`
	NotBefore    *time.Time `json:"not_before,omitempty"`
	Ahead        int64      `json:"ahead"`
	AheadAtLeast bool       `json:"ahead_at_least,omitempty"`
}

func waitToJSON(w *pulsev1.JobWait) *waitJSON {
	if w == nil {
		return nil
	}
	out := &waitJSON{
		Reason:       strings.ToLower(strings.TrimPrefix(w.GetReason().String(), "JOB_WAIT_REASON_")),
		NotBefore:    api.TimeFromWire(w.GetNotBefore()),
		Ahead:        w.GetAhead(),
		AheadAtLeast: w.GetAheadAtLeast(),
	}
	if w.GetPausedBy() != nil {
		s := scopeToJSON(w.GetPausedBy())
		out.PausedBy = &s
	}
	return out
}
