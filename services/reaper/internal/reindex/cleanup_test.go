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

	t.Run("TheNextVacuumToEndWhenNoneRuns", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		require.Empty(t, c.waiting(jobstore.Obstacle{Vacuums: 40}), "no snapshot seen: nothing to wait for")
		c.see(open, oldest)
		closed := jobstore.Obstacle{Vacuums: 41}
		c.see(closed, oldest)
		require.Contains(t, c.waiting(closed), "1 more vacuum")
		c.see(closed, oldest)
		require.NotEmpty(t, c.waiting(closed), "no vacuum has ended since")
		done := jobstore.Obstacle{Vacuums: 42}
		c.see(done, oldest)
		require.Empty(t, c.waiting(done))
	})

	t.Run("OneMoreWhenAVacuumWasRunning", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(open, oldest)
		c.see(jobstore.Obstacle{Vacuum: true, Vacuums: 41}, oldest)
		for _, o := range []jobstore.Obstacle{{Vacuums: 42}, {Vacuum: true, Vacuums: 42}} {
			c.see(o, oldest)
			require.Contains(t, c.waiting(o), "1 more vacuum", "the running one may have started inside the snapshot")
		}
		done := jobstore.Obstacle{Vacuums: 43}
		c.see(done, oldest)
		require.Empty(t, c.waiting(done))
	})

	t.Run("ASnapshotOpenAgainStartsOver", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(open, oldest)
		c.see(jobstore.Obstacle{Vacuums: 41}, oldest)
		c.see(jobstore.Obstacle{Snapshot: time.Minute, Vacuums: 45}, oldest)
		after := jobstore.Obstacle{Vacuums: 45}
		c.see(after, oldest)
		require.Contains(t, c.waiting(after), "1 more vacuum", "counted from the second snapshot's end")
	})

	t.Run("StatisticsResetEndsTheWait", func(t *testing.T) {
		t.Parallel()
		var c cleanup
		c.see(open, oldest)
		c.see(jobstore.Obstacle{Vacuums: 41}, oldest)
		reset := jobstore.Obstacle{Vacuums: 0}
		c.see(reset, oldest)
		require.Empty(t, c.waiting(reset), "the count started again from zero")
	})
}
