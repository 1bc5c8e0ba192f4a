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

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// Deleter is the retention statement (jobstore.Store.DeleteFinishedFrom):
// it deletes up to limit jobs of status older than olderThan that finished
// at from or later, and returns how many and where the next batch starts.
type Deleter interface {
	DeleteFinishedFrom(ctx context.Context, status pulsetype.Status, olderThan time.Duration, limit int, from time.Time) (int64, time.Time, error)
}

// Observer is told what each statement and each pass did, for metrics.
type Observer interface {
	Deleted(status pulsetype.Status, n int64)
	Cleaned(err error)
}

// Config tunes the cleaner. An age of zero disables deletion for that
// status: its jobs are kept forever. How often it cleans is the loop's
// business (app: pkg/server/loop, every PULSE_RETENTION_INTERVAL).
type Config struct {
	// CompletedAge, CanceledAge and DeadLetteredAge are how long after it
	// finished a job of that status is deleted; zero keeps it forever.
	CompletedAge    time.Duration
	CanceledAge     time.Duration
	DeadLetteredAge time.Duration
	// Batch is the most rows one DELETE removes.
	Batch int
}

// JobCleaner deletes finished jobs past their retention age.
type JobCleaner struct {
	cfg      Config
	deleter  Deleter
	observer Observer
	logger   *slog.Logger
}

// NewJobCleaner builds the cleaner. observer may be nil.
func NewJobCleaner(cfg Config, deleter Deleter, observer Observer, logger *slog.Logger) *JobCleaner {
	if observer == nil {
		observer = nopObserver{}
	}
	return &JobCleaner{cfg: cfg, deleter: deleter, observer: observer, logger: logger.With(logging.Loop, "job_cleaner")}
}

// statusAge is one terminal status and how long its jobs are kept.
type statusAge struct {
	status pulsetype.Status
	age    time.Duration
}

// ages lists each terminal status with its retention age, in the order a
// pass runs them.
func (c *JobCleaner) ages() []statusAge {
	return []statusAge{
		{pulsetype.StatusCompleted, c.cfg.CompletedAge},
		{pulsetype.StatusCanceled, c.cfg.CanceledAge},
		{pulsetype.StatusDeadLettered, c.cfg.DeadLetteredAge},
	}
}

// Clean runs one pass: for each status with a non-zero age it deletes in
// batches until one comes back short. It returns how many jobs of each
// status it deleted. A failure on one status does not stop the others.
func (c *JobCleaner) Clean(ctx context.Context) (map[pulsetype.Status]int64, error) {
	ctx, span := otel.Tracer(tracerName).Start(ctx, "reaper.retention")
	defer span.End()
	deleted := map[pulsetype.Status]int64{}
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

// clean deletes one status's due jobs in batches until one comes back
// short. The first batch walks from the oldest finished job; each later one
// starts where the one before stopped (ADR-0060), so a pass does not read
// again, batch after batch, the index entries of the rows it deleted —
// which stay until a vacuum, and stay the whole time a long transaction
// holds a snapshot. A job finished before the cursor by a settle that
// committed late is the next pass's.
func (c *JobCleaner) clean(ctx context.Context, status pulsetype.Status, age time.Duration) (int64, error) {
	var total int64
	var from time.Time
	for {
		n, next, err := c.deleter.DeleteFinishedFrom(ctx, status, age, c.cfg.Batch, from)
		from = next
		if err != nil {
			return total, err
		}
		c.observer.Deleted(status, n)
		total += n
		if n < int64(c.cfg.Batch) || ctx.Err() != nil {
			return total, nil //nolint:nilerr // a stopping reaper ends the pass with what it deleted
		}
	}
}

const tracerName = "github.com/pulsequeue/pulse/services/reaper/internal/retention"

type nopObserver struct{}

func (nopObserver) Deleted(pulsetype.Status, int64) {}
func (nopObserver) Cleaned(error)                   {}
