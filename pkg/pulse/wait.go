package pulse

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

const (
	// waitPoll is how long one WaitJob call waits before control-api
	// answers with the job unfinished and Wait asks again: short enough
	// that no proxy idles the call out, long enough to cost nothing.
	waitPoll = 30 * time.Second
	// waitRetryMin and waitRetryMax bound the backoff between WaitJob
	// calls while control-api is unavailable (restarting, shutting down).
	waitRetryMin = 100 * time.Millisecond
	waitRetryMax = 5 * time.Second
)

// Wait blocks until job id is finished (COMPLETED, DEAD_LETTERED or
// CANCELED) and returns it as it finished, its [JobInfo.Result] included;
// or until ctx is done. It long-polls control-api (WaitJob), which is
// woken by the statement that finishes the job: waiting costs the
// database nothing, however many callers wait. While control-api is
// unavailable (a restart) it retries with backoff until ctx is done.
func (c *Client) Wait(ctx context.Context, id string) (*JobInfo, error) {
	bo := backoff{min: waitRetryMin, max: waitRetryMax}
	for {
		// Only the finish matters here: an unfinished answer without the
		// job lets control-api renew the poll without reading it.
		resp, err := c.rpc.WaitJob(ctx, &pulsev1.WaitJobRequest{Id: id, Timeout: durationpb.New(waitPoll), OmitUnfinishedJob: true})
		switch {
		case err == nil:
			if resp.GetFinished() {
				return jobInfoFromProto(resp.GetJob()), nil
			}
			bo = backoff{min: waitRetryMin, max: waitRetryMax}
			continue
		case ctx.Err() != nil:
			return nil, fmt.Errorf("pulse: wait for job %s: %w", id, context.Cause(ctx))
		case status.Code(err) != codes.Unavailable:
			return nil, fmt.Errorf("pulse: wait for job %s: %w", id, err)
		}
		if !sleepCtx(ctx, bo.next()) {
			return nil, fmt.Errorf("pulse: wait for job %s: %w", id, context.Cause(ctx))
		}
	}
}

// EnqueueAndWait enqueues one job, as [Client.Enqueue] does, and waits for
// it to finish, as [Client.Wait] does: the run-and-wait of a job whose
// caller needs its result. A job that failed or was canceled is returned
// with its status; only the enqueue's or the wait's own failure is an
// error.
func (c *Client) EnqueueAndWait(ctx context.Context, topic string, args any, opts ...EnqueueOption) (*JobInfo, error) {
	sub, err := c.Enqueue(ctx, topic, args, opts...)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx, sub.ID)
}
