package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

// A group's claims resume after the last job the previous claim took while
// that claim came back full, and start from the head again after a short
// claim and at least every ClaimRescanInterval (ADR-0022).
func TestClaimsResumeAfterTheLastClaimedJob(t *testing.T) {
	t.Parallel()
	const rescan = 100 * time.Millisecond
	start := func(t *testing.T, q *queueClaimer, rescan time.Duration) (*dispatch.Dispatcher, *dispatch.Worker) {
		d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: time.Hour, Batch: 100,
			ClaimRescanInterval: rescan}, q, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return d, d.Registry().Add("w", []string{"t"}, 10)
	}
	// finish frees every slot of w, as its handlers would.
	finish := func(d *dispatch.Dispatcher, w *dispatch.Worker) {
		require.Len(t, w.TakeOutbox(), 10)
		d.Registry().Credit(w, 10)
		synctest.Wait()
	}
	// nth is the cursor after the n-th job queueClaimer handed out.
	nth := func(n int) time.Time { return time.Unix(0, 0).Add(time.Duration(n) * time.Microsecond) }

	t.Run("AFullClaimIsFollowedByOneResumingAfterItsLastJob", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q, rescan)
			d.JobsReady()
			synctest.Wait()
			finish(d, w)
			after := q.resumed()
			require.Len(t, after, 2)
			require.Nil(t, after[0], "the first claim starts from the head")
			require.NotNil(t, after[1], "the claim after a full one resumes")
			require.True(t, after[1].SubmittedAt.Equal(nth(10)), "it resumes after the last job taken: %v", after[1].SubmittedAt)
		})
	})

	t.Run("AShortClaimLeavesNoCursor", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 15}
			d, w := start(t, q, rescan)
			d.JobsReady()
			synctest.Wait()
			finish(d, w) // resumes, takes the last 5: short
			require.Len(t, w.TakeOutbox(), 5)
			d.Registry().Credit(w, 5)
			q.mu.Lock()
			q.backlog = 100
			q.mu.Unlock()
			d.JobsReady()
			synctest.Wait()
			after := q.resumed()
			require.Len(t, after, 3)
			require.NotNil(t, after[1])
			require.Nil(t, after[2], "after a short claim the group claims from the head")
		})
	})

	t.Run("EveryRescanIntervalAClaimStartsFromTheHead", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q, rescan)
			d.JobsReady()
			synctest.Wait() // head at t=0
			time.Sleep(rescan / 2)
			finish(d, w) // resumes at t=50ms
			time.Sleep(rescan / 2)
			finish(d, w) // t=100ms: the interval since the head claim is over
			finish(d, w) // resumes after the new head claim's last job
			after := q.resumed()
			require.Len(t, after, 4)
			require.Nil(t, after[0])
			require.NotNil(t, after[1])
			require.Nil(t, after[2], "a claim a rescan interval after the last head claim starts from the head")
			require.NotNil(t, after[3])
			require.True(t, after[3].SubmittedAt.Equal(nth(30)), "%v", after[3].SubmittedAt)
		})
	})

	t.Run("ZeroIntervalClaimsFromTheHeadEveryTime", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q, 0)
			d.JobsReady()
			synctest.Wait()
			finish(d, w)
			finish(d, w)
			require.Equal(t, []*jobstore.ClaimCursor{nil, nil, nil}, q.resumed())
		})
	})
}
