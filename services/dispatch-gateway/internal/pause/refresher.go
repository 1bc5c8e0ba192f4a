package pause

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/backoff"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// Defaults, named so config, docs and code agree.
const (
	// RefreshIntervalDefault is PULSE_PAUSE_REFRESH_INTERVAL's default: the
	// reconciling poll behind NOTIFY (1 s, as the predecessor polled).
	RefreshIntervalDefault = time.Second
	// PrimeTimeoutDefault bounds the boot prime's retries; after it the
	// gateway exits rather than serve without knowing the pause state.
	PrimeTimeoutDefault = 30 * time.Second
	primeRetryMin       = 100 * time.Millisecond
	primeRetryMax       = 2 * time.Second
)

// Reader reads dispatch_control (jobstore.Store.DispatchState).
type Reader interface {
	DispatchState(ctx context.Context) (jobstore.DispatchState, error)
}

// Observer is told about refreshes, for metrics.
type Observer interface {
	// GateRefreshFailed counts a failed read (the gate kept its state).
	GateRefreshFailed()
	// GateFlipped observes the time from a change's commit to this gate
	// holding it.
	GateFlipped(latency time.Duration)
	// GateState is the state the gate now holds.
	GateState(st *jobstore.DispatchState)
}

// RefresherConfig wires a Refresher.
type RefresherConfig struct {
	// Interval is the reconciling poll; zero means RefreshIntervalDefault.
	// Changes arrive sooner through Kick, which the app calls on every
	// NOTIFY on pulse_dispatch_control and after the process's LISTEN
	// connection reconnects (pglisten).
	Interval time.Duration
	// OnChange is called after the gate took a new state (the dispatcher's
	// JobsReady: a resumed scope's backlog is claimable now).
	OnChange func()
	Observer Observer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Refresher keeps a Gate current: Prime once at boot, then Run.
type Refresher struct {
	gate   *Gate
	reader Reader
	cfg    RefresherConfig
	logger *slog.Logger
	kick   chan struct{}
}

// NewRefresher builds the loop for gate.
func NewRefresher(gate *Gate, reader Reader, cfg RefresherConfig, logger *slog.Logger) *Refresher {
	if cfg.Interval <= 0 {
		cfg.Interval = RefreshIntervalDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Refresher{gate: gate, reader: reader, cfg: cfg, logger: logger.With(logging.Loop, "pause_refresher"), kick: make(chan struct{}, 1)}
}

// primeRetry spaces the prime's reads while the state cannot be read.
var primeRetry = backoff.Policy{Initial: primeRetryMin, Max: primeRetryMax, Jitter: 0.2}

// Prime reads the state until it succeeds or ctx is done. It is the boot
// half of the asymmetry: with no known-good value, the gateway must not
// serve, so an error here is fatal to start-up (and /readyz fails until
// then).
func (r *Refresher) Prime(ctx context.Context) error {
	retry := backoff.New(primeRetry)
	for attempt := 1; ; attempt++ {
		st, err := r.reader.DispatchState(ctx)
		if err == nil {
			r.gate.set(&st)
			r.observeState(&st)
			r.logState(&st, "dispatch gate primed")
			return nil
		}
		if r.cfg.Observer != nil {
			r.cfg.Observer.GateRefreshFailed()
		}
		r.logger.Warn("cannot read the pause state; not serving until it can be read", "attempt", attempt, logging.Error, err)
		if backoff.Sleep(ctx, retry.Next()) != nil {
			return fmt.Errorf("prime dispatch gate: the pause state could not be read (%w); last error: %w", ctx.Err(), err)
		}
	}
}

// Run refreshes on every Kick and every interval until ctx is done. A
// failed read logs, counts, and keeps the last known state: at runtime a
// known-good value exists, and a database blip must not flip the gate
// (fail-open: a database blip must not pause or resume the fleet; ADR-0007).
func (r *Refresher) Run(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-r.kick:
		}
		r.refresh(ctx)
	}
}

// refresh reads once and applies the result.
func (r *Refresher) refresh(ctx context.Context) {
	st, err := r.reader.DispatchState(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if r.cfg.Observer != nil {
			r.cfg.Observer.GateRefreshFailed()
		}
		r.logger.Warn("pause state refresh failed; keeping the last known state", logging.Error, err,
			"paused", r.gate.GloballyPaused())
		return
	}
	readDone := r.cfg.Now()
	prev, changed := r.gate.set(&st)
	if !changed {
		return
	}
	if r.cfg.Observer != nil && prev != nil {
		// Measured on the database's clock up to the read, plus the local
		// time since: no clock skew between hosts enters it.
		if newest, ok := newestChange(&st, prev.Version); ok {
			r.cfg.Observer.GateFlipped(st.ReadAt.Sub(newest.UpdatedAt) + r.cfg.Now().Sub(readDone))
		}
	}
	r.observeState(&st)
	r.logState(&st, "dispatch state changed")
	if r.cfg.OnChange != nil {
		r.cfg.OnChange()
	}
}

// Kick asks for a refresh now (a NOTIFY came, or the listener
// reconnected). It never blocks.
func (r *Refresher) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *Refresher) observeState(st *jobstore.DispatchState) {
	if r.cfg.Observer != nil {
		r.cfg.Observer.GateState(st)
	}
}

func (r *Refresher) logState(st *jobstore.DispatchState, msg string) {
	var paused []any
	for _, s := range st.Scopes {
		if s.Paused {
			paused = append(paused, slog.Group(s.Scope, "mode", s.Mode, "reason", s.Reason, "actor", s.Actor))
		}
	}
	r.logger.Info(msg, "version", st.Version, "globally_paused", st.Scope(jobstore.GlobalScope).Paused,
		slog.Group("paused_scopes", paused...))
}

// newestChange is the scope changed most recently after version since.
func newestChange(st *jobstore.DispatchState, since int64) (jobstore.ScopeState, bool) {
	var newest jobstore.ScopeState
	found := false
	for _, s := range st.Scopes {
		if s.Version > since && (!found || s.Version > newest.Version) {
			newest, found = s, true
		}
	}
	return newest, found
}
