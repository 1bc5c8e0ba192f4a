package pauseexpiry

import (
	"context"
	"log/slog"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// IntervalDefault is how often the sweeper looks for expired pauses (the
// app runs Sweep on a pkg/server/loop at this interval): a pause ends at
// most this long after its expiry.
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

// Sweeper resumes expired pauses, one Sweep per tick of its loop. A sweep
// cut short by the loop's stop rolls back whole; the next tick of any
// replica finishes the job.
type Sweeper struct {
	store    Store
	observer Observer
	logger   *slog.Logger
}

// New builds the sweeper. observer may be nil.
func New(store Store, observer Observer, logger *slog.Logger) *Sweeper {
	return &Sweeper{store: store, observer: observer, logger: logger.With(logging.Loop, "pause_expiry")}
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
