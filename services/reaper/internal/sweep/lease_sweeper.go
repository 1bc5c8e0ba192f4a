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

// Reaper is the sweep statement (jobstore.Store): Reap walks every lapsed
// lease, ReapRecent only those that lapsed at most within ago.
type Reaper interface {
	Reap(ctx context.Context, limit int) ([]jobstore.Reaped, error)
	ReapRecent(ctx context.Context, limit int, within time.Duration) ([]jobstore.Reaped, error)
}

// Observer is told what each statement and each sweep did, for metrics.
type Observer interface {
	Reaped(jobs []jobstore.Reaped)
	Swept(took time.Duration, err error)
}

// Config tunes the sweeper. How often it sweeps is the loop's business
// (app: pkg/server/loop, every PULSE_SWEEP_INTERVAL): a lease that lapses
// in place is recovered within the lease TTL plus one interval, one that
// a sweep could first take already lapsed by more than Overlap within
// WholeEvery.
type Config struct {
	// Batch is the most leases one statement settles.
	Batch int
	// WholeEvery is how often a sweep walks every lapsed lease; the sweeps
	// between walk only the leases that lapsed since Overlap before the
	// last sweep that succeeded began (ADR-0067). 0 means
	// WholeEveryDefault.
	WholeEvery time.Duration
	// Overlap is how far before the last sweep's start the next one
	// reaches back: for a lease that committed already lapsed (a claim or
	// heartbeat slower than its own lease) or that the last sweep skipped
	// while another transaction held it. 0 means OverlapDefault.
	Overlap time.Duration
}

const (
	// WholeEveryDefault bounds, for a lease a recent walk cannot see, how
	// long after it lapsed it is reaped.
	WholeEveryDefault = 5 * time.Minute
	// OverlapDefault is the recent walk's reach before the last sweep.
	OverlapDefault = 10 * time.Second
)

// LeaseSweeper settles lapsed leases, one Sweep per tick of its loop.
// Sweeps are not concurrent: its loop runs one at a time.
type LeaseSweeper struct {
	cfg      Config
	reaper   Reaper
	observer Observer
	logger   *slog.Logger

	// lastStart is when the last sweep that succeeded began, and
	// lastWhole when the last whole one did (the monotonic clock; zero
	// before the first).
	lastStart, lastWhole time.Time
}

// NewLeaseSweeper builds the sweeper. observer may be nil.
func NewLeaseSweeper(cfg Config, reaper Reaper, observer Observer, logger *slog.Logger) *LeaseSweeper {
	if observer == nil {
		observer = nopObserver{}
	}
	if cfg.WholeEvery <= 0 {
		cfg.WholeEvery = WholeEveryDefault
	}
	if cfg.Overlap <= 0 {
		cfg.Overlap = OverlapDefault
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
	whole := s.lastStart.IsZero() || start.Sub(s.lastWhole) >= s.cfg.WholeEvery
	total, err := s.sweep(ctx, whole)
	s.observer.Swept(time.Since(start), err)
	if err == nil && ctx.Err() == nil {
		s.lastStart = start
		if whole {
			s.lastWhole = start
		}
	}
	span.SetAttributes(attribute.Int("pulse.reaped", total), attribute.Bool("pulse.sweep.whole", whole))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return total, err
}

// sweep reaps batch after batch. A recent walk reaches back to Overlap
// before the last sweep's start, computed at each statement: the span
// grows with the clock, so its far end stays put however long the sweep.
func (s *LeaseSweeper) sweep(ctx context.Context, whole bool) (int, error) {
	total := 0
	for {
		started := time.Now()
		var reaped []jobstore.Reaped
		var err error
		if whole {
			reaped, err = s.reaper.Reap(ctx, s.cfg.Batch)
		} else {
			reaped, err = s.reaper.ReapRecent(ctx, s.cfg.Batch, started.Sub(s.lastStart)+s.cfg.Overlap)
		}
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
