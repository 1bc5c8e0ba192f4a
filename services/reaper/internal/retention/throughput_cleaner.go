package retention

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// ThroughputDeleter is the throughput retention statement
// (jobstore.Store.DeleteThroughput).
type ThroughputDeleter interface {
	DeleteThroughput(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
}

// ThroughputObserver is told how many rows each statement deleted, for
// metrics.
type ThroughputObserver interface {
	ThroughputDeleted(n int64)
}

// ThroughputConfig tunes the throughput cleaner.
type ThroughputConfig struct {
	// Age is how long job_throughput keeps a minute's counts; zero keeps
	// them forever.
	Age time.Duration
	// Batch is the most rows one DELETE removes.
	Batch int
}

// ThroughputCleaner deletes job_throughput rows (counts per minute, topic
// and writer, migration 00011) older than their retention, so the rollup
// stays a few hundred thousand rows at most however long pulse runs. It
// deletes only minutes long past, which no report or sweep adds to.
type ThroughputCleaner struct {
	cfg      ThroughputConfig
	deleter  ThroughputDeleter
	observer ThroughputObserver
	logger   *slog.Logger
}

// NewThroughputCleaner builds the cleaner. observer may be nil.
func NewThroughputCleaner(cfg ThroughputConfig, deleter ThroughputDeleter, observer ThroughputObserver, logger *slog.Logger) *ThroughputCleaner {
	if observer == nil {
		observer = nopObserver{}
	}
	return &ThroughputCleaner{cfg: cfg, deleter: deleter, observer: observer,
		logger: logger.With(logging.Loop, "throughput_cleaner")}
}

// Clean runs one pass: it deletes in batches until one comes back short,
// and returns how many rows it deleted. With Age zero it does nothing.
func (c *ThroughputCleaner) Clean(ctx context.Context) (int64, error) {
	if c.cfg.Age <= 0 {
		return 0, nil
	}
	ctx, span := otel.Tracer(tracerName).Start(ctx, "reaper.throughput_retention")
	defer span.End()
	var total int64
	for {
		n, err := c.deleter.DeleteThroughput(ctx, c.cfg.Age, c.cfg.Batch)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			return total, err
		}
		c.observer.ThroughputDeleted(n)
		total += n
		if n < int64(c.cfg.Batch) || ctx.Err() != nil {
			break
		}
	}
	span.SetAttributes(attribute.Int64("pulse.deleted.throughput_rows", total))
	if total > 0 {
		c.logger.Info("deleted throughput counts past retention", "older_than", c.cfg.Age, "rows", total)
	}
	return total, nil
}

func (nopObserver) ThroughputDeleted(int64) {}
