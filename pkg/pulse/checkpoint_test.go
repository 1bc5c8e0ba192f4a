package pulse

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

// quiesceGateway answers heartbeats as a gateway whose scope may be
// quiesced, and counts the beats it answered since the last flip.
type quiesceGateway struct {
	*fakegateway.Gateway
	mu       sync.Mutex
	quiesced bool
	canceled bool
	since    atomic.Int64 // beats answered with the current flags
}

func newQuiesceGateway(t *testing.T, welcome *pulsev1.Welcome) *quiesceGateway {
	g := &quiesceGateway{Gateway: fakegateway.New(t, "gw-1", welcome)}
	g.SetHeartbeatFn(func(req *pulsev1.HeartbeatRequest) (*pulsev1.HeartbeatResponse, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		resp := fakegateway.HoldAll(req)
		for _, r := range resp.GetResults() {
			r.Quiesced = g.quiesced
			if g.canceled {
				r.LeaseHeld, r.Canceled = false, true
			}
		}
		g.since.Add(1)
		return resp, nil
	})
	return g
}

func (g *quiesceGateway) set(quiesced, canceled bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.quiesced, g.canceled = quiesced, canceled
	g.since.Store(0)
}

// applied waits until the worker has certainly applied an answer given
// with the current flags: heartbeats are sequential, so a second beat
// arrives only after the first answer was applied.
func (g *quiesceGateway) applied(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return g.since.Load() >= 2 }, liveness, tick)
}

// checkpointHandler calls SafePoint when told to and reports what it
// returned.
type checkpointHandler struct {
	started  chan struct{}
	proceed  chan struct{}
	returned chan error
}

func newCheckpointHandler() *checkpointHandler {
	return &checkpointHandler{started: make(chan struct{}, 1), proceed: make(chan struct{}), returned: make(chan error, 1)}
}

func (h *checkpointHandler) handle(ctx context.Context, _ *Job) error {
	h.started <- struct{}{}
	<-h.proceed
	err := SafePoint(ctx)
	h.returned <- err
	return err
}

func TestCheckpoint(t *testing.T) {
	t.Parallel()

	t.Run("HoldsWhileQuiescedKeepsHeartbeatingAndReturnsOnResume", func(t *testing.T) {
		t.Parallel()
		gw := newQuiesceGateway(t, fakegateway.FastWelcome())
		gw.set(true, false)
		h := newCheckpointHandler()
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": h.handle})
		gw.NextStream(t).Assign(fakegateway.Assignment("j1", "t"))
		<-h.started
		gw.applied(t)
		close(h.proceed)

		require.Never(t, func() bool { return len(h.returned) > 0 }, 200*time.Millisecond, tick, "Checkpoint must hold while quiesced")
		beats := gw.since.Load()
		require.Eventually(t, func() bool { return gw.since.Load() > beats+2 }, liveness, tick, "the lease keeps being renewed while held")

		gw.set(false, false)
		select {
		case err := <-h.returned:
			require.NoError(t, err)
		case <-time.After(liveness):
			t.Fatal("Checkpoint did not return on resume")
		}
		require.Equal(t, pulsev1.Outcome_OUTCOME_COMPLETE, gw.NextResult(t).GetOutcome())
	})

	t.Run("CancelWhileHeldReturnsTheCause", func(t *testing.T) {
		t.Parallel()
		gw := newQuiesceGateway(t, fakegateway.FastWelcome())
		gw.set(true, false)
		h := newCheckpointHandler()
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": h.handle})
		gw.NextStream(t).Assign(fakegateway.Assignment("j1", "t"))
		<-h.started
		gw.applied(t)
		close(h.proceed)
		require.Never(t, func() bool { return len(h.returned) > 0 }, 100*time.Millisecond, tick)

		gw.set(true, true)
		select {
		case err := <-h.returned:
			require.ErrorIs(t, err, ErrJobCanceled)
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(liveness):
			t.Fatal("Checkpoint did not return on cancel")
		}
	})

	t.Run("AStreamAnnouncementRefreshesQuiesceWithoutWaitingForTheInterval", func(t *testing.T) {
		t.Parallel()
		slow := fakegateway.FastWelcome()
		slow.HeartbeatInterval = durationpb.New(time.Hour) // only a poke beats
		gw := newQuiesceGateway(t, slow)
		h := newCheckpointHandler()
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": h.handle})
		fs := gw.NextStream(t)
		fs.Assign(fakegateway.Assignment("j1", "t"))
		<-h.started

		announce := func(version int64, paused bool) {
			st := &pulsev1.DispatchState{Version: version, Paused: paused}
			if paused {
				st.PausedScopes = []*pulsev1.ScopeState{{Scope: "t", Paused: true, Mode: pulsev1.PauseMode_PAUSE_MODE_QUIESCE, Reason: "upgrade"}}
			}
			fs.Send(&pulsev1.StreamJobsResponse{Msg: &pulsev1.StreamJobsResponse_DispatchState{DispatchState: st}})
		}
		gw.set(true, false)
		announce(5, true)
		require.Eventually(t, func() bool { return gw.since.Load() >= 1 }, liveness, tick, "the announcement triggers a beat")
		// The answer is applied right after; give Checkpoint the chance to
		// see it by asking the same question again through the stream.
		announce(6, true)
		gw.applied(t)
		close(h.proceed)
		require.Never(t, func() bool { return len(h.returned) > 0 }, 100*time.Millisecond, tick)

		gw.set(false, false)
		announce(7, false)
		select {
		case err := <-h.returned:
			require.NoError(t, err)
		case <-time.After(liveness):
			t.Fatal("Checkpoint did not return after the resume announcement")
		}
	})

	t.Run("OutsideAHandlerOnlyReportsTheContext", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, Checkpoint(t.Context()))
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(ErrWorkerShutdown)
		err := Checkpoint(ctx)
		require.True(t, errors.Is(err, ErrWorkerShutdown) && errors.Is(err, context.Canceled), err)
	})
}

// TestPushedQuiesceReachesEveryAttemptAtOnce: a pause state pushed on the
// stream sets the quiesce flag of every held attempt without waiting for a
// heartbeat answer — including an attempt that arrives after the push (a
// job claimed just before the pause) — and a heartbeat answer read before
// the push cannot undo it.
func TestPushedQuiesceReachesEveryAttemptAtOnce(t *testing.T) {
	t.Parallel()
	running := newRunningJobs()
	watch := newDispatchWatch(slog.New(slog.DiscardHandler), running)
	noop := func(error) {}
	before, after, other := jobKey{"before", 1}, jobKey{"after", 1}, jobKey{"other", 1}
	now := time.Now()
	require.True(t, running.add(before, "t.a", noop, now.Add(time.Minute), now))
	require.True(t, running.add(other, "t.b", noop, now.Add(time.Minute), now))
	quiesced := func(k jobKey) bool { q, _ := running.quiesceState(k); return q }

	pause := &pulsev1.DispatchState{Version: 7, PausedScopes: []*pulsev1.ScopeState{
		{Scope: "t.a", Paused: true, Mode: pulsev1.PauseMode_PAUSE_MODE_QUIESCE},
	}}
	_, changed := running.quiesceState(before)
	require.True(t, watch.observe(pause, true))
	require.True(t, quiesced(before), "a held attempt of the quiesced topic holds at once")
	require.False(t, quiesced(other), "another topic runs on")
	select {
	case <-changed:
	default:
		t.Fatal("waiting Checkpoints were not woken")
	}
	require.True(t, running.add(after, "t.a", noop, now.Add(time.Minute), now))
	require.True(t, quiesced(after), "an attempt arriving after the push starts quiesced")

	// A heartbeat answer read before the push says nothing is paused.
	require.False(t, watch.observe(&pulsev1.DispatchState{Version: 6}, false), "an older state is not current")
	require.True(t, quiesced(before))

	// A global quiesce, then resume.
	require.True(t, watch.observe(&pulsev1.DispatchState{Version: 8, PausedScopes: []*pulsev1.ScopeState{
		{Scope: "*", Paused: true, Mode: pulsev1.PauseMode_PAUSE_MODE_QUIESCE},
	}}, true))
	require.True(t, quiesced(other))
	require.True(t, watch.observe(&pulsev1.DispatchState{Version: 9}, true))
	for _, k := range []jobKey{before, after, other} {
		require.False(t, quiesced(k), "resume lifts %v", k)
	}
	// A drain pause does not hold checkpoints.
	require.True(t, watch.observe(&pulsev1.DispatchState{Version: 10, PausedScopes: []*pulsev1.ScopeState{
		{Scope: "*", Paused: true, Mode: pulsev1.PauseMode_PAUSE_MODE_DRAIN},
	}}, true))
	require.False(t, quiesced(before))
}

// Checkpoint, SafePoint's deprecated former name, still behaves as it:
// outside a handler it reports only ctx's error.
func TestCheckpointIsSafePoint(t *testing.T) {
	t.Parallel()
	require.NoError(t, Checkpoint(t.Context()))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, Checkpoint(ctx), context.Canceled)
}
