package reindex

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

func TestCleanupWaitsForTheVacuumsAfterALongSnapshot(t *testing.T) {
	t.Parallel()
	const oldest = 10 * time.Second
	open := jobstore.Obstacle{Snapshot: time.Minute, Vacuums: 40}
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

	t.Run("TheNextVacuumToEndWhenNoneRuns", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		require.Empty(t, c.waiting(jobstore.Obstacle{Vacuums: 40}), "no snapshot seen: nothing to wait for")
		c.see(open, oldest, now)
		closed := jobstore.Obstacle{Vacuums: 41}
		c.see(closed, oldest, now)
		require.Contains(t, c.waiting(closed), "1 more vacuum")
		c.see(closed, oldest, now)
		require.NotEmpty(t, c.waiting(closed), "no vacuum has ended since")
		done := jobstore.Obstacle{Vacuums: 42}
		c.see(done, oldest, now)
		require.Empty(t, c.waiting(done))
	})

	t.Run("OneMoreWhenAVacuumWasRunning", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(open, oldest, now)
		c.see(jobstore.Obstacle{Vacuum: true, Vacuums: 41}, oldest, now)
		for _, o := range []jobstore.Obstacle{{Vacuums: 42}, {Vacuum: true, Vacuums: 42}} {
			c.see(o, oldest, now)
			require.Contains(t, c.waiting(o), "1 more vacuum", "the running one may have started inside the snapshot")
		}
		done := jobstore.Obstacle{Vacuums: 43}
		c.see(done, oldest, now)
		require.Empty(t, c.waiting(done))
	})

	t.Run("ASnapshotOpenAgainStartsOver", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(open, oldest, now)
		c.see(jobstore.Obstacle{Vacuums: 41}, oldest, now)
		c.see(jobstore.Obstacle{Snapshot: time.Minute, Vacuums: 45}, oldest, now)
		after := jobstore.Obstacle{Vacuums: 45}
		c.see(after, oldest, now)
		require.Contains(t, c.waiting(after), "1 more vacuum", "counted from the second snapshot's end")
	})

	t.Run("StatisticsResetEndsTheWait", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(open, oldest, now)
		c.see(jobstore.Obstacle{Vacuums: 41}, oldest, now)
		reset := jobstore.Obstacle{Vacuums: 0}
		c.see(reset, oldest, now)
		require.Empty(t, c.waiting(reset), "the count started again from zero")
		require.Equal(t, cleanup{}, c)
	})
}

func TestCleanupFollowsTheHeapBackAfterALongSnapshot(t *testing.T) {
	t.Parallel()
	const oldest = 10 * time.Second
	const mib = 1 << 20
	start := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	at := func(minute int) time.Time { return start.Add(time.Duration(minute) * time.Minute) }
	look := func(heap, vacuums int64) jobstore.Obstacle {
		return jobstore.Obstacle{Heap: heap * mib, Vacuums: vacuums}
	}
	snapshot := func(heap, vacuums int64) jobstore.Obstacle {
		o := look(heap, vacuums)
		o.Snapshot = time.Minute
		return o
	}
	// seen runs the looks of a ten-minute snapshot on a busy queue: the
	// heap at 500 MiB before it (a vacuum's step back to 480 inside it
	// counts), 3,500 MiB when it closes at minute 20, and the vacuum
	// after it ended at minute 25 with the heap as large.
	seen := func(t *testing.T, c *cleanup) {
		t.Helper()
		for _, s := range []struct {
			minute int
			o      jobstore.Obstacle
		}{
			{10, snapshot(500, 40)}, {11, snapshot(480, 40)}, {15, snapshot(1800, 40)},
			{20, look(3500, 40)}, {22, look(3500, 40)}, {25, look(3500, 41)},
		} {
			require.True(t, c.see(s.o, oldest, at(s.minute)).IsZero(), "minute %d", s.minute)
		}
		require.Empty(t, c.waiting(look(3500, 41)), "the vacuum after the snapshot ended: rebuilds go ahead")
	}

	t.Run("SaysWhenTheSnapshotClosedOnceTheHeapIsBack", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		seen(t, &c)
		require.True(t, c.see(look(3500, 42), oldest, at(26)).IsZero())
		require.True(t, c.see(look(961, 43), oldest, at(27)).IsZero(), "more than twice the 480 MiB it had")
		require.Equal(t, at(20), c.see(look(960, 43), oldest, at(28)), "twice the smallest size seen inside the snapshot")
		require.Equal(t, cleanup{}, c)
		require.True(t, c.see(look(400, 44), oldest, at(29)).IsZero(), "once")
	})

	t.Run("AHeapBackWhenTheVacuumsEndNeedsNoSecondRound", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(snapshot(500, 40), oldest, at(10))
		c.see(look(700, 40), oldest, at(11))
		require.True(t, c.see(look(700, 41), oldest, at(12)).IsZero())
		require.Equal(t, cleanup{}, c, "the rebuilds after the vacuum are made over a heap at its size")
		require.True(t, c.see(look(400, 42), oldest, at(13)).IsZero())
	})

	t.Run("ASecondSnapshotKeepsTheSizeBeforeTheFirst", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		seen(t, &c)
		c.see(snapshot(3500, 41), oldest, at(26))
		c.see(look(3600, 41), oldest, at(30))
		require.NotEmpty(t, c.waiting(look(3600, 41)), "its own vacuum to wait for")
		require.True(t, c.see(look(3600, 42), oldest, at(31)).IsZero())
		require.Equal(t, at(20), c.see(look(900, 43), oldest, at(33)), "back within twice 480 MiB; the rebuilds since the first closed")
	})

	t.Run("AHeapThatStaysLargeIsLetGoAfterTheCooldown", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		seen(t, &c)
		require.True(t, c.see(look(3400, 50), oldest, at(25).Add(Cooldown-time.Second)).IsZero())
		require.NotEqual(t, cleanup{}, c)
		require.True(t, c.see(look(3400, 51), oldest, at(25).Add(Cooldown)).IsZero())
		require.Equal(t, cleanup{}, c, "a table grown for good")
		require.True(t, c.see(look(400, 52), oldest, at(90)).IsZero())
	})

	t.Run("AnEmptyTableIsBack", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(snapshot(0, 40), oldest, at(10))
		c.see(look(300, 40), oldest, at(20))
		require.True(t, c.see(look(300, 41), oldest, at(21)).IsZero())
		require.Equal(t, at(20), c.see(look(1, 42), oldest, at(22)))
	})
}
