package reindex

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

func TestCleanupWaitsForTheVacuumsAfterALongSnapshot(t *testing.T) {
	t.Parallel()
	const oldest = 10 * time.Second
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	open := jobstore.Obstacle{Snapshot: time.Minute, Vacuums: 40}

	t.Run("TheNextVacuumToEndWhenNoneRuns", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		require.Empty(t, c.waiting(jobstore.Obstacle{Vacuums: 40}, now), "no snapshot seen: nothing to wait for")
		c.see(open, oldest, now)
		closed := jobstore.Obstacle{Vacuums: 41}
		c.see(closed, oldest, now)
		require.Contains(t, c.waiting(closed, now), "1 more vacuum")
		c.see(closed, oldest, now)
		require.NotEmpty(t, c.waiting(closed, now), "no vacuum has ended since")
		done := jobstore.Obstacle{Vacuums: 42}
		c.see(done, oldest, now)
		require.Empty(t, c.waiting(done, now))
	})

	t.Run("OneMoreWhenAVacuumWasRunning", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(open, oldest, now)
		c.see(jobstore.Obstacle{Vacuum: true, Vacuums: 41}, oldest, now)
		for _, o := range []jobstore.Obstacle{{Vacuums: 42}, {Vacuum: true, Vacuums: 42}} {
			c.see(o, oldest, now)
			require.Contains(t, c.waiting(o, now), "1 more vacuum", "the running one may have started inside the snapshot")
		}
		done := jobstore.Obstacle{Vacuums: 43}
		c.see(done, oldest, now)
		require.Empty(t, c.waiting(done, now))
	})

	t.Run("ASnapshotOpenAgainStartsOver", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(open, oldest, now)
		c.see(jobstore.Obstacle{Vacuums: 41}, oldest, now)
		c.see(jobstore.Obstacle{Snapshot: time.Minute, Vacuums: 45}, oldest, now)
		after := jobstore.Obstacle{Vacuums: 45}
		c.see(after, oldest, now)
		require.Contains(t, c.waiting(after, now), "1 more vacuum", "counted from the second snapshot's end")
	})

	t.Run("StatisticsResetEndsTheWait", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(open, oldest, now)
		c.see(jobstore.Obstacle{Vacuums: 41}, oldest, now)
		reset := jobstore.Obstacle{Vacuums: 0}
		c.see(reset, oldest, now)
		require.Empty(t, c.waiting(reset, now), "the count started again from zero")
	})
}

func TestCleanupThenWaitsForTheHeapToShrinkBack(t *testing.T) {
	t.Parallel()
	const oldest = 10 * time.Second
	const mib = 1 << 20
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

	// closed runs a snapshot over a heap of 100 MiB that it leaves at
	// 800, and the vacuum after it, which ends at start.
	closed := func(t *testing.T) *cleanup {
		t.Helper()
		var c cleanup
		c.see(jobstore.Obstacle{Snapshot: time.Minute, Vacuums: 40, Heap: 100 * mib}, oldest, start.Add(-20*time.Minute))
		c.see(jobstore.Obstacle{Snapshot: 10 * time.Minute, Vacuums: 40, Heap: 800 * mib}, oldest, start.Add(-10*time.Minute))
		c.see(jobstore.Obstacle{Vacuums: 40, Heap: 800 * mib}, oldest, start.Add(-5*time.Minute))
		return &c
	}

	t.Run("UntilItIsBackWithinTwiceItsSizeBeforeTheSnapshot", func(t *testing.T) {
		t.Parallel()
		c := closed(t)
		for _, heap := range []int64{800, 201} {
			o := jobstore.Obstacle{Vacuums: 41, Heap: heap * mib}
			c.see(o, oldest, start.Add(time.Minute))
			require.Contains(t, c.waiting(o, start.Add(time.Minute)), fmt.Sprintf("heap (%d MiB) to shrink back to 200 MiB", heap))
		}
		o := jobstore.Obstacle{Vacuums: 42, Heap: 200 * mib}
		c.see(o, oldest, start.Add(2*time.Minute))
		require.Empty(t, c.waiting(o, start.Add(2*time.Minute)))
		grown := jobstore.Obstacle{Vacuums: 43, Heap: 800 * mib}
		c.see(grown, oldest, start.Add(3*time.Minute))
		require.Empty(t, c.waiting(grown, start.Add(3*time.Minute)), "done: a heap grown since is the queue's own")
	})

	t.Run("NotBeforeTheVacuum", func(t *testing.T) {
		t.Parallel()
		c := closed(t)
		o := jobstore.Obstacle{Vacuums: 40, Heap: 100 * mib}
		c.see(o, oldest, start)
		require.Contains(t, c.waiting(o, start), "1 more vacuum", "a heap back at its size does not replace the vacuum")
	})

	t.Run("UpToHeapWaitAfterTheVacuum", func(t *testing.T) {
		t.Parallel()
		c := closed(t)
		o := jobstore.Obstacle{Vacuums: 41, Heap: 800 * mib}
		c.see(o, oldest, start)
		c.see(o, oldest, start.Add(HeapWait-time.Second))
		require.Contains(t, c.waiting(o, start.Add(HeapWait-time.Second)), "waiting up to 1s")
		c.see(o, oldest, start.Add(HeapWait))
		require.Empty(t, c.waiting(o, start.Add(HeapWait)), "a heap whose end holds a live row does not shrink")
	})

	t.Run("FromTheSmallestHeapSeenWhileOpen", func(t *testing.T) {
		t.Parallel()
		c := closed(t)
		// Another long snapshot while the heap is still large: the size
		// before the first is what the heap shrinks back to.
		again := jobstore.Obstacle{Snapshot: time.Minute, Vacuums: 41, Heap: 800 * mib}
		c.see(again, oldest, start)
		c.see(jobstore.Obstacle{Vacuums: 41, Heap: 900 * mib}, oldest, start.Add(time.Minute))
		o := jobstore.Obstacle{Vacuums: 42, Heap: 300 * mib}
		c.see(o, oldest, start.Add(2*time.Minute))
		require.Contains(t, c.waiting(o, start.Add(2*time.Minute)), "to shrink back to 200 MiB")
	})
}
