package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/services/reaper/internal/clock"
)

// Deleter is the retention statement (jobstore.Store.DeleteFinished).
type Deleter interface {
	DeleteFinished(ctx context.Context, status jobstore.Status, olderThan time.Duration, limit int) (int64, error)
}

// Observer is told what each statement and each pass did, for metrics.
type Observer interface {
	Deleted(status jobstore.Status, n int64)
	Cleaned(err error)
}

// Config tunes the cleaner. An age of zero disables deletion for that
// status: its jobs are kept forever.
type Config struct {
	// Interval is the time between retention passes.
	Interval time.Duration
	// CompletedAge, CanceledAge and DeadLetteredAge are how long after it
	// finished a job of that status is deleted; zero keeps it forever.
	CompletedAge    time.Duration
	CanceledAge     time.Duration
	DeadLetteredAge time.Duration
	// Batch is the most rows one DELETE removes.
	Batch int
	// Clock paces the loop; nil means the wall clock.
	Clock clock.Clock
}

// JobCleaner deletes finished jobs past their retention age.
type JobCleaner struct {
	cfg      Config
	deleter  Deleter
	observer Observer
	logger   *slog.Logger
}

// NewJobCleaner builds the loop; call Run to start it. observer may be nil.
func NewJobCleaner(cfg Config, deleter Deleter, observer Observer, logger *slog.Logger) *JobCleaner {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if observer == nil {
		observer = nopObserver{}
	}
	return &JobCleaner{cfg: cfg, deleter: deleter, observer: observer, logger: logger.With(logging.Loop, "job_cleaner")}
}

// statusAge is one terminal status and how long its jobs are kept.
type statusAge struct {
	status jobstore.Status
	age    time.Duration
}

// ages lists each terminal status with its retention age, in the order a
// pass runs them.
func (c *JobCleaner) ages() []statusAge {
	return []statusAge{
		{jobstore.StatusCompleted, c.cfg.CompletedAge},
		{jobstore.StatusCanceled, c.cfg.CanceledAge},
		{jobstore.StatusDeadLettered, c.cfg.DeadLetteredAge},
	}
}

// Run cleans once at start, then on every tick, until ctx is done. A failed
// pass is logged and tried again on the next tick.
func (c *JobCleaner) Run(ctx context.Context) {
	ticker := c.cfg.Clock.NewTicker(c.cfg.Interval)
	defer ticker.Stop()
	c.logger.Info("job cleaner started", "interval", c.cfg.Interval, "batch", c.cfg.Batch,
		"completed_age", c.cfg.CompletedAge, "canceled_age", c.cfg.CanceledAge, "dead_lettered_age", c.cfg.DeadLetteredAge)
	for {
		if _, err := c.Clean(ctx); err != nil && ctx.Err() == nil {
			c.logger.Error("retention pass failed; retrying on the next tick", logging.Error, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// Clean runs one pass: for each status with a non-zero age it deletes in
// batches until one comes back short. It returns how many jobs of each
// status it deleted. A failure on one status does not stop the others.
func (c *JobCleaner) Clean(ctx context.Context) (map[jobstore.Status]int64, error) {
	ctx, span := otel.Tracer(tracerName).Start(ctx, "reaper.retention")
	defer span.End()
	deleted := map[jobstore.Status]int64{}
	var errs []error
	for _, a := range c.ages() {
		if a.age <= 0 {
			continue
		}
		n, err := c.clean(ctx, a.status, a.age)
		deleted[a.status] = n
		if n > 0 {
			c.logger.Info("deleted finished jobs past retention", "status", a.status, "older_than", a.age, "jobs", n)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete %s jobs: %w", a.status, err))
		}
		span.SetAttributes(attribute.Int64("pulse.deleted."+string(a.status), n))
	}
	err := errors.Join(errs...)
	c.observer.Cleaned(err)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return deleted, err
}

func (c *JobCleaner) clean(ctx context.Context, status jobstore.Status, age time.Duration) (int64, error) {
	var total int64
	for {
		n, err := c.deleter.DeleteFinished(ctx, status, age, c.cfg.Batch)
		if err != nil {
			return total, err
		}
		c.observer.Deleted(status, n)
		total += n
		if n < int64(c.cfg.Batch) || ctx.Err() != nil {
			return total, nil
		}
	}
}

const tracerName = "github.com/pulsequeue/pulse/services/reaper/internal/retention"

type nopObserver struct{}

func (nopObserver) Deleted(jobstore.Status, int64) {}
func (nopObserver) Cleaned(error)                  {}
