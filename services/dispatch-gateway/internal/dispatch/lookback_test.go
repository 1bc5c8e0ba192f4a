package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

// An insert's wake after its commit names when its jobs were submitted
// ("<topic> at <µs>"). A group whose claims resume after a later job than
// that, less the skew margin, claims from that time instead of leaving
// the insert's jobs to a rescan (ADR-0063).
func TestAWakeNamingLateJobsClaimsFromTheirTime(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, q *queueClaimer) (*dispatch.Dispatcher, *dispatch.Worker) {
		d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: time.Hour, Batch: 100,
			ClaimRescanInterval: 100 * time.Millisecond}, q, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return d, d.Registry().Add("w", []string{"t"}, 10)
	}
	// epoch is where queueClaimer's jobs start: the n-th was submitted n µs
	// after it.
	epoch := time.Unix(0, 0)
	wake := func(topic string, at time.Time) string {
		return topic + jobstore.SubmittedReady + strconv.FormatInt(at.UnixMicro(), 10)
	}
	// twoClaims leaves the group's cursor at job 20 with every slot busy
	// and its rescans slow, as an old snapshot makes them: a claim from
	// the head, then a rescan that took 50 ms (the next waits 1 s).
	twoClaims := func(t *testing.T, d *dispatch.Dispatcher, w *dispatch.Worker, q *queueClaimer) {
		d.JobsReady()
		synctest.Wait()
		require.Len(t, w.TakeOutbox(), 10)
		q.mu.Lock()
		q.rescanCost = 50 * time.Millisecond
		q.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		d.Registry().Credit(w, 10)
		time.Sleep(q.rescanCost + time.Millisecond)
		synctest.Wait()
		require.Len(t, w.TakeOutbox(), 10)
		require.Equal(t, "before", q.claimedFrom()[1].from)
	}
	// cheapClaims leaves the group's cursor at job 20 with every slot busy
	// and its rescans cheap: a claim from the head, then one resuming
	// after job 10.
	cheapClaims := func(t *testing.T, d *dispatch.Dispatcher, w *dispatch.Worker) {
		d.JobsReady()
		synctest.Wait()
		require.Len(t, w.TakeOutbox(), 10)
		d.Registry().Credit(w, 10)
		synctest.Wait()
		require.Len(t, w.TakeOutbox(), 10)
	}
	// leftToARescan: the claim after the late wake resumed the margin
	// before the cursor (no lookback), found nothing, and a rescan
	// followed at once (the wake counted as one of jobs that may sort
	// before the cursor, and rescans are cheap).
	leftToARescan := func(t *testing.T, q *queueClaimer) {
		f := q.claimedFrom()
		require.Len(t, f, 4)
		require.Equal(t, "after", f[2].from)
		require.True(t, f[2].at.SubmittedAt.Equal(epoch.Add(20*time.Microsecond-jobstore.ClaimSkewMargin)), "no lookback: %v", f[2].at.SubmittedAt)
		require.Equal(t, "before", f[3].from, "nothing after the cursor: a rescan at once")
	}
	claimAgain := func(d *dispatch.Dispatcher, w *dispatch.Worker) {
		d.Registry().Credit(w, 10)
		synctest.Wait()
	}

	t.Run("JobsSubmittedBeforeTheCursorAreClaimedFromTheirTime", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q)
			twoClaims(t, d, w, q)
			late := epoch.Add(-time.Second) // an insert that committed a second late
			d.TopicReady(wake("t", late))
			claimAgain(d, w)
			f := q.claimedFrom()
			require.Len(t, f, 3)
			require.Equal(t, "after", f[2].from)
			require.Equal(t, jobstore.ClaimCursor{Priority: 5, SubmittedAt: late}, f[2].at,
				"from the insert's time, before every job submitted at it, in the cursor's priority")
			require.Equal(t, uuid.Nil, f[2].at.ID)

			require.Len(t, w.TakeOutbox(), 10)
			claimAgain(d, w)
			f = q.claimedFrom()
			require.True(t, f[3].at.SubmittedAt.Equal(epoch.Add(30*time.Microsecond-jobstore.ClaimSkewMargin)),
				"the wake is spent: the next claim resumes after the last job taken, %v", f[3].at.SubmittedAt)
		})
	})

	// A wake of jobs that sort within the margin is an insert's new jobs;
	// another topic's is not this group's.
	for name, payload := range map[string]string{
		"JobsWithinTheMarginChangeNothing":    wake("t", epoch.Add(20*time.Microsecond-jobstore.ClaimSkewMargin)),
		"AnotherTopicsWakeIsNotThisGroups":    wake("other", epoch.Add(-time.Second)),
		"AnInsertsNewJobsChangeNothingEither": "t" + jobstore.NewJobsReady,
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := &queueClaimer{backlog: 1000}
				d, w := start(t, q)
				twoClaims(t, d, w, q)
				d.TopicReady(payload)
				claimAgain(d, w)
				f := q.claimedFrom()
				require.Len(t, f, 3)
				require.True(t, f[2].at.SubmittedAt.Equal(epoch.Add(20*time.Microsecond-jobstore.ClaimSkewMargin)),
					"the claim resumes the margin before the cursor: %v", f[2].at.SubmittedAt)
			})
		})
	}

	t.Run("TheEarliestOfSeveralWakesIsWhereTheClaimStarts", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q)
			twoClaims(t, d, w, q)
			d.TopicReady(wake("t", epoch.Add(-time.Second)))
			d.TopicReady(wake("t", epoch.Add(-3*time.Second)))
			d.TopicReady(wake("t", epoch.Add(-2*time.Second)))
			claimAgain(d, w)
			f := q.claimedFrom()
			require.True(t, f[2].at.SubmittedAt.Equal(epoch.Add(-3*time.Second)), "%v", f[2].at.SubmittedAt)
		})
	})

	// Further back than MaxLookback the walk over what was claimed since
	// would cost more than a rescan: such a wake counts as one of jobs
	// that may sort before the cursor, and a claim after the cursor that
	// finds nothing rescans at once while rescans are cheap (ADR-0050).
	t.Run("JobsFurtherBackThanMaxLookbackAreLeftToARescan", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q)
			cheapClaims(t, d, w)
			q.mu.Lock()
			q.afterEmpty = true
			q.mu.Unlock()
			d.TopicReady(wake("t", epoch.Add(-dispatch.MaxLookback-time.Second)))
			claimAgain(d, w)
			leftToARescan(t, q)
		})
	})

	// What a dispatcher remembers is bounded: past MaxLateTopics topics a
	// late wake counts as one of jobs that may sort before a cursor.
	t.Run("PastMaxLateTopicsAWakeIsLeftToARescan", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q)
			cheapClaims(t, d, w)
			for i := range dispatch.MaxLateTopics {
				d.TopicReady(wake("idle."+strconv.Itoa(i), epoch.Add(-time.Second))) // no worker claims them
			}
			synctest.Wait()
			q.mu.Lock()
			q.afterEmpty = true
			q.mu.Unlock()
			d.TopicReady(wake("t", epoch.Add(-time.Second)))
			claimAgain(d, w)
			leftToARescan(t, q)
		})
	})

	// While rescans are cheap the next one finds a late insert's jobs
	// within the configured interval: no lookback, and a claim after the
	// cursor that finds nothing rescans at once (ADR-0050).
	t.Run("WhileRescansAreCheapALateWakeIsLeftToTheNextRescan", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q)
			cheapClaims(t, d, w)
			q.mu.Lock()
			q.afterEmpty = true
			q.mu.Unlock()
			d.TopicReady(wake("t", epoch.Add(-time.Second)))
			claimAgain(d, w)
			leftToARescan(t, q)
		})
	})

	// A lookback that filled every slot with jobs sorting before the
	// cursor may have left more of the late insert's jobs there: the next
	// claim looks back again, from the last job it took.
	t.Run("ALookbackThatFillsEverySlotBehindTheCursorLooksBackAgain", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q)
			twoClaims(t, d, w, q)
			q.mu.Lock()
			q.taken = -100000 // the next jobs handed out sort 100 ms before the epoch
			q.mu.Unlock()
			d.TopicReady(wake("t", epoch.Add(-time.Second)))
			claimAgain(d, w)
			require.Len(t, w.TakeOutbox(), 10)
			claimAgain(d, w)
			f := q.claimedFrom()
			require.Len(t, f, 4)
			require.True(t, f[3].at.SubmittedAt.Equal(epoch.Add(-99990*time.Microsecond)),
				"from the last job the lookback took: %v", f[3].at.SubmittedAt)
		})
	})
}

func TestReadyAtReadsOnlyATopicAndATime(t *testing.T) {
	t.Parallel()
	topic, at, ok := jobstore.ReadyAt("email.send at 1732712345123456")
	require.True(t, ok)
	require.Equal(t, "email.send", topic)
	require.Equal(t, int64(1732712345123456), at.UnixMicro())
	for _, p := range []string{"email.send", "email.send new", "email.send limits", "email.send at ", "email.send at 12x", "email.send at 99999999999999999999"} {
		_, _, ok := jobstore.ReadyAt(p)
		require.False(t, ok, "%q", p)
	}
}
