package pauseexpiry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// IntervalDefault is how often the sweeper looks for expired pauses: a
// pause ends at most this long after its expiry.
const IntervalDefault = time.Second

// Store is the part of jobstore.Store the sweeper uses.
type Store interface {
	ResumeExpired(ctx context.Context) ([]jobstore.ScopeState, error)
	DispatchState(ctx context.Context) (jobstore.DispatchState, error)
}

// Observer is told what each sweep found, for metrics.
type Observer interface {
	// DispatchAutoResumed is one expired pause resumed.
	DispatchAutoResumed(scope string)
	// DispatchState is the state read after the sweep (the paused gauges).
	DispatchState(st jobstore.DispatchState)
}

// Sweeper resumes expired pauses on every tick.
type Sweeper struct {
	store    Store
	observer Observer
	interval time.Duration
	logger   *slog.Logger

	cancel context.CancelFunc
	done   sync.WaitGroup
}

// New builds the sweeper; interval 0 means IntervalDefault. observer may be
// nil.
func New(store Store, observer Observer, interval time.Duration, logger *slog.Logger) *Sweeper {
	if interval <= 0 {
		interval = IntervalDefault
	}
	return &Sweeper{store: store, observer: observer, interval: interval,
		logger: logger.With(logging.Loop, "pause_expiry")}
}

// Start runs the loop in the background until Stop.
func (s *Sweeper) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done.Go(func() { s.run(ctx) })
}

// Stop ends the loop, abandoning a sweep in flight (its transaction rolls
// back whole; the next tick of any replica finishes the job).
func (s *Sweeper) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	s.done.Wait()
}

func (s *Sweeper) run(ctx context.Context) {
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("pause expiry sweep failed; retrying on the next tick", logging.Error, err)
		}
	}
}

// Sweep resumes every expired pause once, then refreshes the paused gauges.
func (s *Sweeper) Sweep(ctx context.Context) error {
	resumed, err := s.store.ResumeExpired(ctx)
	if err != nil {
		return err
	}
	for _, sc := range resumed {
		s.logger.Info("pause expired; dispatch resumed automatically", "scope", sc.Scope, "actor", sc.Actor, "version", sc.Version)
		if s.observer != nil {
			s.observer.DispatchAutoResumed(sc.Scope)
		}
	}
	if s.observer == nil {
		return nil
	}
	st, err := s.store.DispatchState(ctx)
	if err != nil {
		return err
	}
	s.observer.DispatchState(st)
	return nil
}
