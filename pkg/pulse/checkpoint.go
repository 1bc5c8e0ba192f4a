package pulse

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// Checkpoint marks a safe point in a handler: a place where the job could
// wait without harm (between steps, before a side effect). While an
// operator has paused the job's scope (its topic, or all of dispatch) in
// quiesce mode, Checkpoint blocks; the worker keeps heartbeating, so the
// job's lease holds however long the pause lasts. It returns nil as soon as
// the scope is resumed (or switched to drain), and ctx's error, with its
// cause ([ErrJobCanceled], [ErrLeaseLost], [ErrWorkerShutdown]), if the
// job is canceled or the lease is lost while it waits.
//
// When nothing is quiesced Checkpoint returns at once: nil, or ctx's error
// if ctx is already done, which makes it a good place to notice
// cancellation too. Called outside a handler it only reports ctx's error.
// A handler that never calls Checkpoint simply runs on through a quiesce,
// exactly as under drain.
//
// The worker learns of a quiesce from its heartbeat answers, and checks at
// once when the gateway announces a pause or resume on its stream, so a
// checkpoint reacts within moments, and at worst within one heartbeat
// interval.
func Checkpoint(ctx context.Context) error {
	cp, ok := ctx.Value(checkpointKey{}).(checkpoint)
	for {
		if ctx.Err() != nil {
			return checkpointError(ctx)
		}
		if !ok {
			return nil
		}
		quiesced, changed := cp.running.quiesceState(cp.key)
		if !quiesced {
			return nil
		}
		select {
		case <-ctx.Done():
			return checkpointError(ctx)
		case <-changed:
		}
	}
}

// checkpointError is ctx's error wrapping its cause, so errors.Is matches
// both context.Canceled and, say, ErrJobCanceled.
func checkpointError(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
}

type checkpointKey struct{}

// checkpoint is what a handler's context carries for Checkpoint: the
// attempt and where its quiesce flag lives.
type checkpoint struct {
	running *runningJobs
	key     jobKey
}

func withCheckpoint(ctx context.Context, running *runningJobs, k jobKey) context.Context {
	return context.WithValue(ctx, checkpointKey{}, checkpoint{running: running, key: k})
}

// setQuiesced records what the gateway said about the attempt's scope and
// wakes every Checkpoint waiting on a change.
func (r *runningJobs) setQuiesced(k jobKey, quiesced bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[k]
	if !ok || j.quiesced == quiesced {
		return
	}
	j.quiesced = quiesced
	close(r.quiesceChanged)
	r.quiesceChanged = make(chan struct{})
}

// quiesceState reports whether the attempt is quiesced, and a channel
// closed at the next change of any attempt's flag.
func (r *runningJobs) quiesceState(k jobKey) (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[k]
	return ok && j.quiesced, r.quiesceChanged
}

// dispatchWatch follows the pause state the gateways report, on streams
// and in heartbeat answers: it logs it once per version (a paused worker
// is idle on purpose, which is not an error) and, when a stream announces
// a change, asks the heartbeater to beat now so running jobs' quiesce flags
// follow at once rather than at the next interval.
type dispatchWatch struct {
	log *slog.Logger

	mu        sync.Mutex
	version   int64
	wasPaused bool
	beatNow   chan struct{}
}

func newDispatchWatch(log *slog.Logger) *dispatchWatch {
	return &dispatchWatch{log: log.With(logKeyComponent, "dispatch"), beatNow: make(chan struct{}, 1)}
}

// observe takes a state; fromStream says a gateway pushed it.
func (d *dispatchWatch) observe(st *pulsev1.DispatchState, fromStream bool) {
	if st == nil {
		return
	}
	d.mu.Lock()
	newer := st.GetVersion() > d.version
	if newer {
		d.version = st.GetVersion()
	}
	paused := len(st.GetPausedScopes()) > 0
	logResume := newer && !paused && d.wasPaused
	if newer {
		d.wasPaused = paused
	}
	d.mu.Unlock()
	if fromStream && newer {
		select {
		case d.beatNow <- struct{}{}:
		default:
		}
	}
	switch {
	case newer && paused:
		attrs := []any{logKeyVersion, st.GetVersion(), logKeyPaused, st.GetPaused()}
		for _, s := range st.GetPausedScopes() {
			attrs = append(attrs, slog.Group("scope_"+s.GetScope(),
				"mode", modeName(s.GetMode()), "reason", s.GetReason(), "actor", s.GetActor()))
		}
		d.log.Info("dispatch paused by an operator; this worker's paused topics get no new jobs", attrs...)
	case logResume:
		d.log.Info("dispatch resumed", logKeyVersion, st.GetVersion())
	}
}

func modeName(m pulsev1.PauseMode) string {
	if m == pulsev1.PauseMode_PAUSE_MODE_QUIESCE {
		return "quiesce"
	}
	return "drain"
}
