package jobstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

func TestExplainWait(t *testing.T) {
	t.Parallel()

	explainOf := func(t *testing.T, b *testBundle, id uuid.UUID) *jobstore.JobWait {
		t.Helper()
		j, err := b.store.Get(ctx, id)
		require.NoError(t, err)
		w, err := b.store.ExplainWait(ctx, j)
		require.NoError(t, err)
		return w
	}

	t.Run("QueuedBehindHigherAndEarlierEqualPriorityJobsOfItsTopic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		base := time.Now().Add(-time.Hour)
		for i := range 3 {
			insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 9, SubmittedAt: base.Add(time.Duration(i+10) * time.Second)})
		}
		insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 5, SubmittedAt: base})
		insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 5, SubmittedAt: base.Add(time.Second)})
		me := insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 5, SubmittedAt: base.Add(2 * time.Second)})
		insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 5, SubmittedAt: base.Add(3 * time.Second)})
		insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 1, SubmittedAt: base})
		for range 5 {
			insertRow(t, b.pool, rowOpts{Topic: "other", Priority: 9, SubmittedAt: base})
		}
		serve(t, b, "a")
		w := explainOf(t, b, me)
		require.Equal(t, jobstore.WaitQueued, w.Reason)
		require.EqualValues(t, 5, w.Ahead)
		require.False(t, w.AheadAtLeast)
		require.Nil(t, w.NotBefore)
	})

	t.Run("TheBoundCountsJobsOfItsOwnTopic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		base := time.Now().Add(-time.Hour)
		// The claim order puts ten jobs of another topic first, then two of
		// this one, in each band.
		for i := range 10 {
			insertRow(t, b.pool, rowOpts{Topic: "other", Priority: 9, SubmittedAt: base.Add(time.Duration(i) * time.Millisecond)})
			insertRow(t, b.pool, rowOpts{Topic: "other", Priority: 5, SubmittedAt: base.Add(time.Duration(i) * time.Millisecond)})
		}
		for i := range 2 {
			insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 9, SubmittedAt: base.Add(time.Second + time.Duration(i)*time.Millisecond)})
			insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 5, SubmittedAt: base.Add(time.Second + time.Duration(i)*time.Millisecond)})
		}
		me := insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 5, SubmittedAt: base.Add(time.Minute)})
		j, err := b.store.Get(ctx, me)
		require.NoError(t, err)
		ahead := func(limit int) (n int64, atLeast bool) {
			var now time.Time
			require.NoError(t, b.pool.QueryRow(ctx, jobstore.JobAheadSQL, j.Topic, j.Priority, j.SubmittedAt, j.ID, limit).Scan(&now, &n, &atLeast))
			return n, atLeast
		}
		n, atLeast := ahead(3)
		require.EqualValues(t, 4, n, "two per band, however many jobs of other topics come first")
		require.False(t, atLeast, "neither band reached the bound")
		n, atLeast = ahead(2)
		require.EqualValues(t, 4, n)
		require.True(t, atLeast, "a band that fills its bound makes the count a lower bound")
		n, atLeast = ahead(1)
		require.EqualValues(t, 2, n)
		require.True(t, atLeast)
	})

	t.Run("NoWorkerServesItsTopicSaysWhenOneLastDid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		me := insertRow(t, b.pool, rowOpts{Topic: "a"})
		w := explainOf(t, b, me)
		require.Equal(t, jobstore.WaitNoWorker, w.Reason)
		require.Nil(t, w.WorkerLastSeen, "never")
		require.Zero(t, w.Ahead)

		at := serve(t, b, "a", "b")
		require.Equal(t, jobstore.WaitQueued, explainOf(t, b, me).Reason)
		require.NoError(t, b.store.LeavePresence(ctx, []jobstore.Left{{WorkerID: "w-a", ConnectedAt: at}}))
		w = explainOf(t, b, me)
		require.Equal(t, jobstore.WaitNoWorker, w.Reason)
		require.NotNil(t, w.WorkerLastSeen)
		require.WithinDuration(t, time.Now(), *w.WorkerLastSeen, 5*time.Second)

		// A worker whose gateway stopped refreshing it serves nothing.
		serve(t, b, "a")
		_, err := b.pool.Exec(ctx, `UPDATE worker_presence SET last_seen = now() - interval '1 hour', expires_at = now() - interval '59 minutes'`)
		require.NoError(t, err)
		require.Equal(t, jobstore.WaitNoWorker, explainOf(t, b, me).Reason)

		// Pause and time say more than presence.
		_, err = b.store.Pause(ctx, pauseReq("a", jobstore.PauseDrain, "vendor down", "alice"))
		require.NoError(t, err)
		require.Equal(t, jobstore.WaitPaused, explainOf(t, b, me).Reason)
	})

	t.Run("PausedScopeIsTheReasonAndSaysWhoAndWhy", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		me := insertRow(t, b.pool, rowOpts{Topic: "a"})
		_, err := b.store.Pause(ctx, pauseReq("a", jobstore.PauseDrain, "vendor down", "alice"))
		require.NoError(t, err)
		w := explainOf(t, b, me)
		require.Equal(t, jobstore.WaitPaused, w.Reason)
		require.Equal(t, "a", w.PausedBy.Scope)
		require.Equal(t, "alice", w.PausedBy.Actor)
		require.Equal(t, "vendor down", w.PausedBy.Reason)
		require.NotNil(t, w.PausedBy.PausedAt)
	})

	t.Run("RunAtAndBackoffAreReportedWithTheirTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		future := newJob("a", 5)
		future.RunAt = time.Now().Add(time.Hour)
		_, err := b.store.Insert(ctx, []pulsetype.NewJob{future})
		require.NoError(t, err)
		w := explainOf(t, b, future.ID)
		require.Equal(t, jobstore.WaitScheduled, w.Reason)
		require.WithinDuration(t, future.RunAt, *w.NotBefore, time.Millisecond)

		retrying := insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusRetrying})
		_, err = b.pool.Exec(ctx, `UPDATE jobs SET next_run_at = now() + interval '1 minute' WHERE id = $1`, retrying)
		require.NoError(t, err)
		require.Equal(t, jobstore.WaitRetryBackoff, explainOf(t, b, retrying).Reason)
	})

	t.Run("RunningAndFinishedJobsAreNotWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Nil(t, explainOf(t, b, insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusRunning})))
		require.Nil(t, explainOf(t, b, insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusCompleted})))
	})

	t.Run("TheCountWalksBoundedIndexRanges", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobs := make([]pulsetype.NewJob, 2000)
		for i := range jobs {
			jobs[i] = newJob([]string{"a", "b"}[i%2], int16(i%11))
		}
		_, err := b.store.Insert(ctx, jobs)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `ANALYZE jobs`)
		require.NoError(t, err)
		plan := explain(t, b, jobstore.PinnedPlanSQL, jobstore.JobAheadSQL,
			"a", 5, time.Now(), jobs[0].ID, jobstore.WaitAheadScanLimit)
		nodes := strings.Join(plan.nodes(), ",")
		require.Equal(t, 2, strings.Count(nodes, "Index Scan jobs_claim_idx"), nodes)
		require.NotContains(t, nodes, "Sort")
		require.NotContains(t, nodes, "Seq Scan")
		require.Contains(t, plan.text, `"Index Cond"`)
	})
}

// serve records a connected worker (worker id "w-" + its first topic) for
// topics, as a gateway does when a stream opens, and returns the row's mark.
func serve(t *testing.T, b *testBundle, topics ...string) time.Time {
	t.Helper()
	at, err := b.store.OpenPresence(ctx, "gw-test", jobstore.Presence{WorkerID: "w-" + topics[0], Principal: "anonymous", Topics: topics}, time.Minute)
	require.NoError(t, err)
	return at
}
