package pause_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pglisten"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/pause"
)

var errDown = errors.New("database unreachable")

// scriptedReader answers from a state it is told, or fails while down.
type scriptedReader struct {
	mu    sync.Mutex
	state jobstore.DispatchState
	down  bool
	reads atomic.Int64
}

func (r *scriptedReader) DispatchState(context.Context) (jobstore.DispatchState, error) {
	r.reads.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return jobstore.DispatchState{}, errDown
	}
	return r.state, nil
}

func (r *scriptedReader) set(version int64, globalPaused bool, down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.state = jobstore.DispatchState{Version: version, ReadAt: now, Scopes: []jobstore.ScopeState{{
		Scope: jobstore.GlobalScope, Paused: globalPaused, Mode: jobstore.PauseDrain, Version: version, UpdatedAt: now,
	}}}
	if globalPaused {
		r.state.Scopes[0].Reason = "maintenance"
	}
	r.down = down
}

// countingObserver records what the refresher reports.
type countingObserver struct {
	failures, flips atomic.Int64
	lastState       atomic.Pointer[jobstore.DispatchState]
}

func (o *countingObserver) GateRefreshFailed()                   { o.failures.Add(1) }
func (o *countingObserver) GateFlipped(time.Duration)            { o.flips.Add(1) }
func (o *countingObserver) GateState(st *jobstore.DispatchState) { o.lastState.Store(st) }

type testBundle struct {
	gate     *pause.Gate
	reader   *scriptedReader
	observer *countingObserver
	changes  atomic.Int64
	r        *pause.Refresher
}

func setup(t *testing.T, interval time.Duration) *testBundle {
	t.Helper()
	b := &testBundle{gate: pause.NewGate(), reader: &scriptedReader{}, observer: &countingObserver{}}
	b.r = pause.NewRefresher(b.gate, b.reader, pause.RefresherConfig{
		Interval: interval, OnChange: func() { b.changes.Add(1) }, Observer: b.observer,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return b
}

// run starts the refresh loop until the test ends.
func (b *testBundle) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { b.r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestRefresher(t *testing.T) {
	t.Parallel()

	t.Run("BootPrimeFailureLeavesTheGateClosedAndNotReady", func(t *testing.T) {
		t.Parallel()
		b := setup(t, time.Hour)
		b.reader.set(1, false, true)
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		err := b.r.Prime(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, errDown.Error())
		require.False(t, b.gate.Primed())
		require.ErrorIs(t, b.gate.ReadinessCheck(t.Context()), pause.ErrNotPrimed)
		// Fail-safe: knowing nothing, the gate stops every claim.
		require.True(t, b.gate.GloballyPaused())
		require.True(t, b.gate.Blocks([]string{"any"}))
		require.Nil(t, b.gate.State())
		require.Positive(t, b.observer.failures.Load())
	})

	t.Run("PrimeRetriesUntilTheStateCanBeRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, time.Hour)
		b.reader.set(1, false, true)
		go func() {
			for b.reader.reads.Load() < 2 {
				time.Sleep(time.Millisecond)
			}
			b.reader.set(1, false, false)
		}()
		require.NoError(t, b.r.Prime(t.Context()))
		require.True(t, b.gate.Primed())
		require.NoError(t, b.gate.ReadinessCheck(t.Context()))
		require.False(t, b.gate.GloballyPaused())
	})

	t.Run("RuntimeReadErrorKeepsTheLastKnownState", func(t *testing.T) {
		t.Parallel()
		for _, paused := range []bool{true, false} {
			b := setup(t, 5*time.Millisecond)
			b.reader.set(7, paused, false)
			require.NoError(t, b.r.Prime(t.Context()))
			b.reader.set(8, !paused, true) // the database goes away
			b.run(t)
			require.Eventually(t, func() bool { return b.observer.failures.Load() >= 3 }, 10*time.Second, time.Millisecond)
			require.Equal(t, paused, b.gate.GloballyPaused(), "a blip must not flip the gate")
			require.EqualValues(t, 7, b.gate.State().Version)
			require.Zero(t, b.changes.Load())
		}
	})

	t.Run("AChangeFlipsTheGateWakesStreamsAndTheDispatcher", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 5*time.Millisecond)
		b.reader.set(1, false, false)
		require.NoError(t, b.r.Prime(t.Context()))
		changed := b.gate.Changed()
		b.run(t)
		b.reader.set(2, true, false)
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatal("Changed was not closed")
		}
		require.True(t, b.gate.GloballyPaused())
		require.Eventually(t, func() bool { return b.changes.Load() == 1 && b.observer.flips.Load() == 1 }, 10*time.Second, time.Millisecond)
		require.True(t, b.observer.lastState.Load().Scope(jobstore.GlobalScope).Paused)
	})

	t.Run("NotifyFlipsTheGateWithoutWaitingForThePoll", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		store := jobstore.New(pool)
		gate := pause.NewGate()
		logger := slog.New(slog.NewTextHandler(io.Discard, nil))
		r := pause.NewRefresher(gate, store, pause.RefresherConfig{
			Interval: time.Hour, // only NOTIFY can flip it within the test
		}, logger)
		require.NoError(t, r.Prime(t.Context()))
		// Wired as the app wires it: the process's LISTEN connection kicks
		// a refresh on every notification and once LISTEN holds.
		l := pglisten.New(pglisten.FromPool(pool), logger)
		l.Handle(jobstore.DispatchControlChannel, pglisten.Handler{Notify: func(string) { r.Kick() }, Resync: r.Kick})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		require.NoError(t, l.Start(ctx))
		defer func() { require.NoError(t, l.Stop(t.Context())); cancel(); <-done }()

		require.False(t, gate.GloballyPaused())
		_, err := store.Pause(ctx, jobstore.PauseRequest{Scope: jobstore.GlobalScope, Mode: jobstore.PauseDrain, Reason: "x", Actor: "t"})
		require.NoError(t, err)
		// Every refresh in this test is a kick, and kicks come only once
		// LISTEN is in place (the connect's own kick covers a pause that
		// committed before it): once the pause is seen, the resume can only
		// arrive by NOTIFY.
		require.Eventually(t, gate.GloballyPaused, 10*time.Second, time.Millisecond)
		_, err = store.Resume(ctx, jobstore.GlobalScope, "t")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return !gate.GloballyPaused() }, 10*time.Second, time.Millisecond)
	})
}

func TestGate(t *testing.T) {
	t.Parallel()

	t.Run("NilGateIsOpen", func(t *testing.T) {
		t.Parallel()
		var g *pause.Gate
		require.False(t, g.GloballyPaused())
		require.False(t, g.Blocks([]string{"a"}))
		require.Nil(t, g.State())
	})

	t.Run("BlocksAGroupOnlyWhenEveryTopicIsPaused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, time.Hour)
		b.reader.mu.Lock()
		b.reader.state = jobstore.DispatchState{Version: 3, Scopes: []jobstore.ScopeState{
			{Scope: jobstore.GlobalScope, Version: 1},
			{Scope: "a", Paused: true, Mode: jobstore.PauseDrain, Reason: "r", Version: 3},
		}}
		b.reader.mu.Unlock()
		require.NoError(t, b.r.Prime(t.Context()))
		require.False(t, b.gate.GloballyPaused())
		require.True(t, b.gate.Blocks([]string{"a"}))
		require.False(t, b.gate.Blocks([]string{"a", "b"}))
		require.False(t, b.gate.Blocks([]string{"b"}))
	})
}
