package sweep

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/services/reaper/internal/clock"
	"github.com/pulsequeue/pulse/services/reaper/internal/reapmetrics"
)

// Reaper is the sweep statement (jobstore.Store.Reap).
type Reaper interface {
	Reap(ctx context.Context, limit int) ([]jobstore.Reaped, error)
}

// Observer is told what each statement and each sweep did, for metrics.
type Observer interface {
	Reaped(jobs []jobstore.Reaped)
	Swept(took time.Duration, err error)
}

// Config tunes the sweeper.
type Config struct {
	// Interval is the time between sweeps; worst-case recovery latency is
	// the lease TTL plus one interval.
	Interval time.Duration
	// Batch is the most leases one statement settles.
	Batch int
	// Clock paces the loop; nil means the wall clock.
	Clock clock.Clock
}

// LeaseSweeper settles lapsed leases on every tick.
type LeaseSweeper struct {
	cfg      Config
	reaper   Reaper
	observer Observer
	logger   *slog.Logger
}

// NewLeaseSweeper builds the loop; call Run to start it. observer may be nil.
func NewLeaseSweeper(cfg Config, reaper Reaper, observer Observer, logger *slog.Logger) *LeaseSweeper {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if observer == nil {
		observer = nopObserver{}
	}
	return &LeaseSweeper{cfg: cfg, reaper: reaper, observer: observer, logger: logger.With(logging.Loop, "lease_sweeper")}
}

// Run sweeps once at start (a restarted reaper catches up at once), then on
// every tick, until ctx is done. A failed sweep, a database outage included,
// is logged and tried again on the next tick; it never ends the loop.
// Cancelling ctx abandons the statement in flight, which Postgres rolls
// back whole: no job is ever half-reaped.
func (s *LeaseSweeper) Run(ctx context.Context) {
	ticker := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	s.logger.Info("lease sweeper started", "interval", s.cfg.Interval, "batch", s.cfg.Batch)
	for {
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.logger.Error("lease sweep failed; retrying on the next tick", logging.Error, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// Sweep reaps expired leases batch after batch until one comes back short,
// and returns how many it reaped.
func (s *LeaseSweeper) Sweep(ctx context.Context) (int, error) {
	ctx, span := otel.Tracer(tracerName).Start(ctx, "reaper.lease_sweep")
	defer span.End()
	start := s.cfg.Clock.Now()
	total, err := s.sweep(ctx)
	s.observer.Swept(s.cfg.Clock.Now().Sub(start), err)
	span.SetAttributes(attribute.Int("pulse.reaped", total))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return total, err
}

func (s *LeaseSweeper) sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		started := time.Now()
		reaped, err := s.reaper.Reap(ctx, s.cfg.Batch)
		if err != nil {
			return total, err
		}
		s.observer.Reaped(reaped)
		traceReaped(ctx, started, reaped)
		for _, r := range reaped {
			// Never the args: they belong to the application.
			s.logger.Info("worker lease expired; job reaped",
				logging.JobID, r.ID, logging.Topic, r.Topic, logging.Attempt, r.Attempt,
				logging.WorkerID, r.LockedBy, "outcome", reapmetrics.Outcome(r.Status))
		}
		total += len(reaped)
		if len(reaped) < s.cfg.Batch || ctx.Err() != nil {
			return total, nil
		}
	}
}

const tracerName = "github.com/pulsequeue/pulse/services/reaper/internal/sweep"

type nopObserver struct{}

func (nopObserver) Reaped([]jobstore.Reaped)   {}
func (nopObserver) Swept(time.Duration, error) {}
