package reindex

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

func TestDueRebuildsThePartialIndexesLast(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	r := NewReindexer(Config{Bloat: 4, MinFreed: mib}, nil, nil, nil, slog.New(slog.DiscardHandler))
	// Every one far past its estimate (a few entries), on a small table.
	index := func(name string, bytes int64, partial bool) jobstore.IndexSize {
		return jobstore.IndexSize{Name: name, Bytes: bytes * mib, Entries: 10, KeyWidth: 16,
			TableBytes: 100 * mib, TableCounted: 10, TableLive: 10, Partial: partial}
	}
	sizes := []jobstore.IndexSize{
		index("jobs_finished_idx", 40, true),
		index("jobs_claim_idx", 300, true),
		index("jobs_pkey", 200, false),
		index("jobs_expired_lease_idx", 20, true),
		index("jobs_other_idx", 250, false),
		index("jobs_small_idx", 1, true), // gives back less than MinFreed
	}
	var names []string
	for _, s := range r.due(sizes, time.Now()) {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"jobs_other_idx", "jobs_pkey", "jobs_expired_lease_idx", "jobs_finished_idx", "jobs_claim_idx"}, names,
		"over every row first, most given back first; then the partial ones, most given back last")
}

func TestAnIndexThatGrewBackAfterItsRebuildIsHeldAtItsWorkingSize(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	rebuiltAt := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	after := rebuiltAt.Add
	claimIndex := func(bytes int64) []jobstore.IndexSize {
		// Far past its estimate (a few queued jobs), as the claim index
		// is at its working size.
		return []jobstore.IndexSize{{Name: "jobs_claim_idx", Bytes: bytes * mib, Entries: 300, KeyWidth: 32,
			TableBytes: 300 * mib, TableCounted: 5e5, TableLive: 5e5, Partial: true}}
	}
	setup := func(t *testing.T) *Reindexer {
		t.Helper()
		r := NewReindexer(Config{Bloat: 4, MinFreed: 16 * mib}, nil, nil, nil, slog.New(slog.DiscardHandler))
		r.rebuilt["jobs_claim_idx"] = rebuild{at: rebuiltAt, bytes: 40 * mib}
		return r
	}
	due := func(r *Reindexer, bytes int64, now time.Time) bool {
		sizes := claimIndex(bytes)
		r.settle(context.Background(), sizes, now)
		return len(r.due(sizes, now)) == 1
	}

	t.Run("BackNearItsSizeWhenTheCooldownEnds", func(t *testing.T) {
		t.Parallel()
		r := setup(t)
		require.False(t, due(r, 30, after(30*time.Minute)), "within the cooldown")
		require.False(t, due(r, 36, after(Cooldown)), "back at 36 of 40 MiB when the cooldown ended: its working size")
		require.False(t, due(r, 60, after(5*time.Hour)), "held below twice its size before the rebuild")
		require.True(t, due(r, 80, after(5*time.Hour)), "grown to twice that: bloated past its working size")
	})

	t.Run("RebuiltAtThatSizeOnceMoreAfterTheHold", func(t *testing.T) {
		t.Parallel()
		r := setup(t)
		require.False(t, due(r, 36, after(Cooldown)))
		require.False(t, due(r, 36, after(WorkingHold-time.Minute)))
		require.True(t, due(r, 36, after(WorkingHold)), "a workload that has quietened gives its index back within a day")
	})

	t.Run("NotHeldWhenTheRebuildGaveBackWhatLasted", func(t *testing.T) {
		t.Parallel()
		r := setup(t)
		require.False(t, due(r, 12, after(Cooldown)), "12 MiB, under the floor: nothing to give back")
		require.True(t, due(r, 30, after(3*time.Hour)), "it stayed under half its size when the cooldown ended, so growing since is not its working size")
	})

	t.Run("NotSettledWhileALongSnapshotIsOpen", func(t *testing.T) {
		t.Parallel()
		r := setup(t)
		r.cleanup.see(jobstore.Obstacle{Snapshot: time.Minute, Heap: 300 * mib}, 10*time.Second, after(Cooldown))
		r.settle(context.Background(), claimIndex(36), after(Cooldown))
		require.Zero(t, r.rebuilt["jobs_claim_idx"].settled, "an index grown under a snapshot is not at its working size")
		r.cleanup = cleanup{}
		r.settle(context.Background(), claimIndex(36), after(Cooldown+time.Minute))
		require.Equal(t, int64(36*mib), r.rebuilt["jobs_claim_idx"].settled, "settled at the first pass after it")
	})
}
