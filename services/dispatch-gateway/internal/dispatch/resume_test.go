package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

// A group's claims resume after the last job the previous claim took while
// that claim came back full, start from the head again after a short
// claim, and look before the cursor first at least every
// ClaimRescanInterval (ADR-0022).
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

	// froms is where each claim so far started.
	froms := func(q *queueClaimer) []string {
		var out []string
		for _, f := range q.claimedFrom() {
			out = append(out, f.from)
		}
		return out
	}

	t.Run("AFullClaimIsFollowedByOneResumingAfterItsLastJob", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q, rescan)
			d.JobsReady()
			synctest.Wait()
			finish(d, w)
			require.Equal(t, []string{"head", "after"}, froms(q))
			at := q.claimedFrom()[1].at
			require.True(t, at.SubmittedAt.Equal(nth(10)), "it resumes after the last job taken: %v", at.SubmittedAt)
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
			require.Equal(t, []string{"head", "after", "head"}, froms(q), "after a short claim the group claims from the head")
		})
	})

	t.Run("EveryRescanIntervalAClaimLooksBeforeTheCursorFirst", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q, rescan)
			d.JobsReady()
			synctest.Wait() // from the head at t=0
			time.Sleep(rescan / 2)
			finish(d, w) // resumes at t=50ms
			time.Sleep(rescan / 2)
			finish(d, w) // t=100ms: rescans
			finish(d, w) // resumes
			time.Sleep(rescan)
			finish(d, w) // t=200ms: rescans
			require.Equal(t, []string{"head", "after", "before", "after", "before"}, froms(q))
			f := q.claimedFrom()
			require.True(t, f[2].at.SubmittedAt.Equal(nth(20)), "the rescan looks before the last job taken: %v", f[2].at.SubmittedAt)
			require.True(t, f[3].at.SubmittedAt.Equal(nth(30)), "%v", f[3].at.SubmittedAt)
		})
	})

	t.Run("ARescanNeverMovesTheCursorBack", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q, rescan)
			d.JobsReady()
			synctest.Wait()
			finish(d, w) // cursor at job 20
			// The rescan finds ten stragglers that sort before the cursor.
			q.mu.Lock()
			q.taken = -100
			q.mu.Unlock()
			time.Sleep(rescan)
			finish(d, w)
			finish(d, w)
			f := q.claimedFrom()
			require.Equal(t, []string{"head", "after", "before", "after"}, froms(q))
			require.True(t, f[3].at.SubmittedAt.Equal(nth(20)), "the cursor stays after the last job of the backlog: %v", f[3].at.SubmittedAt)
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
			require.Equal(t, []string{"head", "head", "head"}, froms(q))
		})
	})
}
