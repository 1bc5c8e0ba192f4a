package dispatch_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

// A group's claims resume after the last job a claim of it took (a margin
// before it), also after a short claim, start from the head when none took
// anything, and look before the cursor first every rescan interval: the
// configured one, or RescanCostFactor times what the last rescan took
// (ADR-0022, ADR-0050).
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
	// nth is where a claim resuming after the n-th job queueClaimer
	// handed out starts: the margin before it.
	nth := func(n int) time.Time {
		return time.Unix(0, 0).Add(time.Duration(n) * time.Microsecond).Add(-jobstore.ClaimSkewMargin)
	}

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

	t.Run("AShortClaimKeepsItsCursor", func(t *testing.T) {
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
			require.Equal(t, []string{"head", "after", "after"}, froms(q),
				"a queue that keeps up (short claims) is claimed around its cursor, not from the head")
			require.True(t, q.claimedFrom()[2].at.SubmittedAt.Equal(nth(15)), "%v", q.claimedFrom()[2].at.SubmittedAt)
		})
	})

	// Only a wake that may be of jobs sorting before the cursor (a plain
	// topic: a released child, a retried job) does: not freed slots, and
	// not an insert's new jobs, which a gateway that lost the race for
	// them to another finds taken (ADR-0055).
	t.Run("AWakeThatFindsNothingAfterTheCursorRescansAtOnceWhileRescansAreCheap", func(t *testing.T) {
		for _, slow := range []bool{false, true} {
			synctest.Test(t, func(t *testing.T) {
				q := &queueClaimer{backlog: 1000}
				d, w := start(t, q, rescan)
				d.JobsReady()
				synctest.Wait()
				if slow { // one slow rescan: the next waits 20 × 50 ms
					q.mu.Lock()
					q.rescanCost = 50 * time.Millisecond
					q.mu.Unlock()
					time.Sleep(rescan)
					finish(d, w)
					time.Sleep(q.rescanCost + time.Millisecond)
					synctest.Wait()
				}
				require.Len(t, w.TakeOutbox(), 10)
				d.Registry().Credit(w, 10)
				synctest.Wait() // resumes after the cursor
				require.Len(t, w.TakeOutbox(), 10)
				q.mu.Lock()
				q.afterEmpty = true // what is left sorts before the cursor
				q.mu.Unlock()
				d.Registry().Credit(w, 10)
				synctest.Wait() // freed slots: after the cursor, nothing
				d.TopicReady("t" + jobstore.NewJobsReady)
				synctest.Wait() // new jobs: after the cursor, nothing
				require.Empty(t, w.TakeOutbox())
				d.TopicReady("t")
				synctest.Wait()
				got := froms(q)
				if slow {
					require.Equal(t, []string{"head", "before", "after", "after", "after", "after"}, got,
						"rescans are slow: the group waits for its interval")
				} else {
					require.Equal(t, []string{"head", "after", "after", "after", "after", "before"}, got,
						"told of jobs that may sort before the cursor: a rescan at once")
					require.Len(t, w.TakeOutbox(), 10, "the rescan found them")
				}
			})
		}
	})

	t.Run("AClaimFromTheHeadThatTookNothingLeavesNoCursor", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{}
			d, _ := start(t, q, rescan)
			d.JobsReady()
			synctest.Wait()
			q.mu.Lock()
			q.backlog = 5
			q.mu.Unlock()
			d.JobsReady()
			synctest.Wait()
			// The worker's arrival and each wake may each cause a claim;
			// with no job taken yet, every one of them starts at the head.
			got := froms(q)
			require.GreaterOrEqual(t, len(got), 2)
			for _, f := range got {
				require.Equal(t, "head", f, "no claim took a job, so none resumes after a cursor: %v", got)
			}
		})
	})

	t.Run("ASlowRescanSpacesTheNextOne", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const cost = 50 * time.Millisecond // the next rescan waits 20 × 50 ms = 1 s
			q := &queueClaimer{backlog: 100000, rescanCost: cost}
			d, w := start(t, q, rescan)
			d.JobsReady()
			synctest.Wait()
			time.Sleep(rescan)
			finish(d, w) // t=100ms: rescans, until t=150ms
			time.Sleep(cost + time.Millisecond)
			synctest.Wait()
			finish(d, w) // t=151ms: resumes
			time.Sleep(500 * time.Millisecond)
			finish(d, w) // t=650ms: the 100 ms interval passed, the rescan's own did not
			time.Sleep(500 * time.Millisecond)
			finish(d, w) // t=1.15s: 1 s after the rescan began
			time.Sleep(cost + time.Millisecond)
			synctest.Wait()
			require.Equal(t, []string{"head", "before", "after", "after", "before"}, froms(q))
		})
	})

	t.Run("AFailedRescanKeepsTheCursorAndBacksOff", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 100000, rescanErr: errors.New("canceling statement due to statement timeout")}
			d, w := start(t, q, rescan)
			d.JobsReady()
			synctest.Wait()
			time.Sleep(rescan)
			d.Registry().Credit(w, 0)
			require.Len(t, w.TakeOutbox(), 10)
			d.Registry().Credit(w, 10)
			synctest.Wait() // t=100ms: the rescan fails; the group backs off
			q.mu.Lock()
			q.rescanErr = nil
			q.mu.Unlock()
			time.Sleep(time.Second) // past the claim backoff
			d.JobsReady()
			synctest.Wait()
			f := q.claimedFrom()
			require.GreaterOrEqual(t, len(f), 3)
			require.Equal(t, []string{"head", "before", "after"}, froms(q)[:3],
				"after a failed rescan the group resumes after its cursor, and rescans again only after twice the interval")
			require.True(t, f[2].at.SubmittedAt.Equal(nth(10)), "%v", f[2].at.SubmittedAt)
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
