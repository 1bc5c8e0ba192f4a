package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

// switchGate is a pause gate flipped by the test.
type switchGate struct {
	global atomic.Bool
	topic  atomic.Value // string: the one paused topic, "" for none
}

func (g *switchGate) GloballyPaused() bool { return g.global.Load() }

func (g *switchGate) Blocks(topics []string) bool {
	if g.global.Load() {
		return true
	}
	t, _ := g.topic.Load().(string)
	for _, tp := range topics {
		if tp != t {
			return false
		}
	}
	return len(topics) > 0
}

func TestDispatcherGate(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, gate *switchGate) (*jobstore.Store, *countingClaimer, *dispatch.Dispatcher) {
		t.Helper()
		store := jobstore.New(pgtest.Pool(t))
		claimer := &countingClaimer{store: store}
		d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: 10 * time.Millisecond, Batch: 50},
			claimer, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		d.SetGate(gate)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return store, claimer, d
	}

	t.Run("GloballyPausedIssuesNoClaimQueriesAtAll", func(t *testing.T) {
		t.Parallel()
		gate := &switchGate{}
		gate.global.Store(true)
		store, claimer, d := setup(t, gate)
		insertJobs(t, store, "t", 5)
		w := d.Registry().Add("w", []string{"t"}, 5)
		for range 20 {
			d.JobsReady()
		}
		// The poll ticks every 10 ms: dozens of chances to claim.
		require.Never(t, func() bool { return claimer.calls.Load() > 0 }, 300*time.Millisecond, 5*time.Millisecond)

		gate.global.Store(false)
		d.JobsReady() // what the refresher does on a change
		require.Eventually(t, func() bool { return len(w.TakeOutbox()) > 0 }, 10*time.Second, time.Millisecond)
	})

	t.Run("AGroupWhoseEveryTopicIsPausedIsNotClaimedForOthersAre", func(t *testing.T) {
		t.Parallel()
		gate := &switchGate{}
		gate.topic.Store("paused")
		store, claimer, d := setup(t, gate)
		// The database does not know about this pause, so only the gate
		// can keep these jobs from the paused group.
		insertJobs(t, store, "paused", 3)
		only := d.Registry().Add("only-paused", []string{"paused"}, 5)
		d.JobsReady()
		require.Never(t, func() bool { return claimer.calls.Load() > 0 }, 300*time.Millisecond, 5*time.Millisecond)
		require.Empty(t, only.TakeOutbox())
		// Each poll tick reserves the group's slots and gives them back
		// unclaimed: a look may land inside a pass, never for long.
		require.Eventually(t, func() bool { _, free := d.Registry().Stats(); return free == 5 },
			10*time.Second, time.Millisecond, "the skipped group's slots are given back")

		both := d.Registry().Add("both", []string{"open", "paused"}, 5)
		require.Eventually(t, func() bool { return len(both.TakeOutbox()) > 0 }, 10*time.Second, time.Millisecond)
	})
}
