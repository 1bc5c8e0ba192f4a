package pulse

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// SafePoint marks a safe point in a handler: a place where the job could
// wait without harm (between steps, before a side effect). While an
// operator has paused the job's scope (its topic, or all of dispatch) in
// quiesce mode, SafePoint blocks; the worker keeps heartbeating, so the
// job's lease holds however long the pause lasts. It returns nil as soon as
// the scope is resumed (or switched to drain), and ctx's error, with its
// cause ([ErrJobCanceled], [ErrLeaseLost], [ErrWorkerShutdown]), if the
// job is canceled or the lease is lost while it waits.
//
// When nothing is quiesced SafePoint returns at once: nil, or ctx's error
// if ctx is already done, which makes it a good place to notice
// cancellation too. Called outside a handler it only reports ctx's error.
// A handler that never calls SafePoint simply runs on through a quiesce,
// exactly as under drain.
//
// The gateway announces every pause and resume on the worker's stream as
// soon as it learns of it (within milliseconds of the commit), and a
// SafePoint reacts to that at once, also for jobs that arrive after the
// announcement; heartbeat answers carry the same state as the fallback.
//
// SafePoint saves nothing: to record how far a job has come, use
// [Job.SetProgress] and [Job.SetMetadata].
func SafePoint(ctx context.Context) error {
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

// Checkpoint is SafePoint's former name.
//
// Deprecated: use [SafePoint]. The name promised saved progress, which it
// never kept; it only waits while the job's scope is quiesced.
func Checkpoint(ctx context.Context) error { return SafePoint(ctx) }

// checkpointError is ctx's error wrapping its cause, so errors.Is matches
// both context.Canceled and, say, ErrJobCanceled.
func checkpointError(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err { //nolint:errorlint // identity: context.Cause is ctx.Err() itself when no cause was given
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

// applyQuiesce sets every held attempt's flag from a pause state's
// quiesced scopes, wakes the Checkpoints whose flag changed, and keeps the
// scopes for attempts that arrive later.
func (r *runningJobs) applyQuiesce(scopes map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.quiesced = scopes
	changed := false
	for _, j := range r.jobs {
		q := scopes["*"] || scopes[j.topic]
		if j.quiesced != q {
			j.quiesced, changed = q, true
		}
	}
	if changed {
		close(r.quiesceChanged)
		r.quiesceChanged = make(chan struct{})
	}
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
// and in heartbeat answers. It logs it once per version (a paused worker
// is idle on purpose, which is not an error), applies a newer state's
// quiesced scopes to every held attempt at once — including attempts that
// arrive after the state, such as a job claimed just before a quiesce — and,
// when a stream announces a change, asks the heartbeater to beat now, so
// the gateway's per-job answer confirms it.
type dispatchWatch struct {
	log     *slog.Logger
	running *runningJobs

	mu        sync.Mutex
	version   int64
	wasPaused bool
	beatNow   chan struct{}
}

func newDispatchWatch(log *slog.Logger, running *runningJobs) *dispatchWatch {
	return &dispatchWatch{log: log.With(logKeyComponent, "dispatch"), running: running, beatNow: make(chan struct{}, 1)}
}

// observe takes a state; fromStream says a gateway pushed it. It reports
// whether the state is current (no older than the newest seen), so a
// heartbeat answer read before a newer push does not undo it; a missing
// state counts as current.
func (d *dispatchWatch) observe(st *pulsev1.DispatchState, fromStream bool) (current bool) {
	if st == nil {
		return true
	}
	d.mu.Lock()
	newer := st.GetVersion() > d.version
	current = st.GetVersion() >= d.version
	if newer {
		d.version = st.GetVersion()
		scopes := map[string]bool{}
		for _, s := range st.GetPausedScopes() {
			if s.GetPaused() && s.GetMode() == pulsev1.PauseMode_PAUSE_MODE_QUIESCE {
				scopes[s.GetScope()] = true
			}
		}
		if d.running != nil {
			d.running.applyQuiesce(scopes)
		}
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
	return current
}

func modeName(m pulsev1.PauseMode) string {
	if m == pulsev1.PauseMode_PAUSE_MODE_QUIESCE {
		return "quiesce"
	}
	return "drain"
}
