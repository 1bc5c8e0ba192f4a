package api

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pausewire"
)

var waitReasonToWire = map[jobstore.WaitReason]pulsev1.JobWaitReason{
	jobstore.WaitPaused:             pulsev1.JobWaitReason_JOB_WAIT_REASON_PAUSED,
	jobstore.WaitScheduled:          pulsev1.JobWaitReason_JOB_WAIT_REASON_SCHEDULED,
	jobstore.WaitRetryBackoff:       pulsev1.JobWaitReason_JOB_WAIT_REASON_RETRY_BACKOFF,
	jobstore.WaitQueued:             pulsev1.JobWaitReason_JOB_WAIT_REASON_QUEUED,
	jobstore.WaitNoWorker:           pulsev1.JobWaitReason_JOB_WAIT_REASON_NO_WORKER,
	jobstore.WaitSnoozed:            pulsev1.JobWaitReason_JOB_WAIT_REASON_SNOOZED,
	jobstore.WaitBreakerOpen:        pulsev1.JobWaitReason_JOB_WAIT_REASON_BREAKER_OPEN,
	jobstore.WaitRateLimited:        pulsev1.JobWaitReason_JOB_WAIT_REASON_RATE_LIMITED,
	jobstore.WaitConcurrencyKeyFull: pulsev1.JobWaitReason_JOB_WAIT_REASON_CONCURRENCY_KEY_FULL,
	jobstore.WaitSequenceBlocked:    pulsev1.JobWaitReason_JOB_WAIT_REASON_SEQUENCE_BLOCKED,
}

// WaitToWire converts why a job is not running; nil stays nil.
func WaitToWire(w *jobstore.JobWait) *pulsev1.JobWait {
	if w == nil {
		return nil
	}
	out := &pulsev1.JobWait{Reason: waitReasonToWire[w.Reason], Ahead: w.Ahead, AheadAtLeast: w.AheadAtLeast}
	if w.PausedBy != nil {
		out.PausedBy = pausewire.ScopeToWire(*w.PausedBy)
	}
	if w.NotBefore != nil {
		out.NotBefore = timestamppb.New(*w.NotBefore)
	}
	if w.WorkerLastSeen != nil {
		out.WorkerLastSeen = timestamppb.New(*w.WorkerLastSeen)
	}
	if w.BlockedBy != nil {
		out.BlockedBy = w.BlockedBy.String()
	}
	out.MaxRunningPerKey = int32(w.MaxRunningPerKey)
	return out
}
