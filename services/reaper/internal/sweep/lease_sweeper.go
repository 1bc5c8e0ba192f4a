package sweep

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"
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

// Config tunes the sweeper. How often it sweeps is the loop's business
// (app: pkg/server/loop, every PULSE_SWEEP_INTERVAL; worst-case recovery
// latency is the lease TTL plus one interval).
type Config struct {
	// Batch is the most leases one statement settles.
	Batch int
}

// LeaseSweeper settles lapsed leases, one Sweep per tick of its loop.
type LeaseSweeper struct {
	cfg      Config
	reaper   Reaper
	observer Observer
	logger   *slog.Logger
}

// NewLeaseSweeper builds the sweeper. observer may be nil.
func NewLeaseSweeper(cfg Config, reaper Reaper, observer Observer, logger *slog.Logger) *LeaseSweeper {
	if observer == nil {
		observer = nopObserver{}
	}
	return &LeaseSweeper{cfg: cfg, reaper: reaper, observer: observer, logger: logger.With(logging.Loop, "lease_sweeper")}
}

// Sweep reaps expired leases batch after batch until one comes back short,
// and returns how many it reaped. A failure, a database outage included,
// is returned for the loop to log, count and retry; cancelling ctx
// abandons the statement in flight, which Postgres rolls back whole: no
// job is ever half-reaped.
func (s *LeaseSweeper) Sweep(ctx context.Context) (int, error) {
	ctx, span := otel.Tracer(tracerName).Start(ctx, "reaper.lease_sweep")
	defer span.End()
	start := time.Now()
	total, err := s.sweep(ctx)
	s.observer.Swept(time.Since(start), err)
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
			// Never the args: they belong to the application. The line
			// carries the job's trace id (its stored submit context).
			jobCtx := trace.ContextWithSpanContext(ctx, telemetry.StoredSpanContext(r.TraceParent, r.TraceState))
			s.logger.InfoContext(jobCtx, "worker lease expired; job reaped",
				logging.JobID, r.ID, logging.Topic, r.Topic, logging.Attempt, r.Attempt,
				logging.WorkerID, r.LockedBy, "outcome", reapmetrics.Outcome(r.Status))
		}
		total += len(reaped)
		if len(reaped) < s.cfg.Batch || ctx.Err() != nil {
			return total, nil //nolint:nilerr // a stopping reaper ends the pass with what it reaped
		}
	}
}

const tracerName = "github.com/pulsequeue/pulse/services/reaper/internal/sweep"

type nopObserver struct{}

func (nopObserver) Reaped([]jobstore.Reaped)   {}
func (nopObserver) Swept(time.Duration, error) {}
