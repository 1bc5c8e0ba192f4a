package api

import (
	"context"
	"time"

	"github.com/google/uuid"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// Bounds of one wait for a job to finish (WaitJob, GET /v1/jobs/{id}?wait=).
// A longer wait is a loop of waits: each answers at its timeout with the
// job as it is, so no proxy or load balancer idles a connection out.
const (
	MinWaitTimeout     = time.Millisecond
	MaxWaitTimeout     = 5 * time.Minute
	DefaultWaitTimeout = 30 * time.Second
)

// WaitJob answers once the job is finished or its timeout passes.
func (s *ControlService) WaitJob(ctx context.Context, req *pulsev1.WaitJobRequest) (*pulsev1.WaitJobResponse, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	timeout := DefaultWaitTimeout
	if req.GetTimeout() != nil {
		if timeout, err = jobspec.ValidateDuration("timeout", req.GetTimeout(), MinWaitTimeout, MaxWaitTimeout); err != nil {
			return nil, err
		}
	}
	job, finished, err := s.Wait(ctx, id, timeout, !req.GetOmitUnfinishedJob())
	if err != nil {
		return nil, err
	}
	if job == nil { // unfinished, asked without the job
		return &pulsev1.WaitJobResponse{}, nil
	}
	return &pulsev1.WaitJobResponse{Job: JobToWire(job), Finished: finished}, nil
}

// Wait returns job id once it is finished (COMPLETED, DEAD_LETTERED or
// CANCELED), or as it is when timeout passes (nil without withJob), and
// whether it finished. It reads the job twice at most: once after
// registering the waiter (so a settle committed after the read wakes it),
// unless the process already knows it unfinished (a renewal: the hub's
// Known), and once when woken, or when timed out withJob. While it waits
// it costs Postgres nothing.
func (s *ControlService) Wait(ctx context.Context, id uuid.UUID, timeout time.Duration, withJob bool) (*jobstore.Job, bool, error) {
	if s.opts.Waiters == nil {
		return nil, false, apierr.Unavailable("waiting for jobs is not enabled on this server", nil)
	}
	wake, release, err := s.opts.Waiters.Watch(ctx, id)
	if err != nil {
		return nil, false, apierr.Unavailable("wait for job", err)
	}
	defer release()
	if known, token := s.opts.Waiters.Known(id); !known {
		job, err := s.store.Get(ctx, id)
		if err != nil || job.Status.Terminal() {
			return job, err == nil, err
		}
		s.opts.Waiters.MarkUnfinished(id, wake, token)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-wake:
	case <-timer.C:
		if !withJob {
			return nil, false, nil
		}
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	job, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, false, err
	}
	return job, job.Status.Terminal(), nil
}
