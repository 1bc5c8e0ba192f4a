package retention

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// The tables the pruner keeps bounded, as they appear in its metric's
// table label and its logs.
const (
	TablePresence      = "worker_presence"
	TableTopicSeen     = "worker_topic_seen"
	TableControlEvents = "control_events"
)

// PruneStore is the pruning statements (jobstore.Store's SweepPresence,
// DeleteTopicSeen and DeleteControlEvents).
type PruneStore interface {
	SweepPresence(ctx context.Context, limit int) (int64, error)
	DeleteTopicSeen(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
	DeleteControlEvents(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
}

// PruneObserver is told how many rows of a table each statement deleted.
type PruneObserver interface {
	Pruned(table string, n int64)
}

// PruneConfig tunes the pruner.
type PruneConfig struct {
	// TopicSeenAge is how long worker_topic_seen remembers a topic no
	// worker serves any more; zero keeps every topic forever.
	TopicSeenAge time.Duration
	// AuditAge is how long control_events keeps a pause or resume; zero
	// keeps the audit forever. The schema refuses to delete a row younger
	// than jobstore.AuditRetentionFloor.
	AuditAge time.Duration
	// Batch is the most rows one DELETE removes.
	Batch int
}

// Pruner deletes, in bounded batches, the rows of the tables beside jobs
// that would otherwise grow with time rather than with load: expired
// worker presence (which only a running gateway sweeps otherwise), topics
// no worker has served for TopicSeenAge, and pause audit rows older than
// AuditAge.
type Pruner struct {
	cfg      PruneConfig
	store    PruneStore
	observer PruneObserver
	logger   *slog.Logger
}

// NewPruner builds the pruner. observer may be nil.
func NewPruner(cfg PruneConfig, store PruneStore, observer PruneObserver, logger *slog.Logger) *Pruner {
	if observer == nil {
		observer = nopObserver{}
	}
	return &Pruner{cfg: cfg, store: store, observer: observer, logger: logger.With(logging.Loop, "pruner")}
}

// Prune runs one pass over every table, each in batches until one comes
// back short, and returns the rows deleted per table. A table's error does
// not keep the others from being pruned; the errors are joined.
func (p *Pruner) Prune(ctx context.Context) (map[string]int64, error) {
	ctx, span := otel.Tracer(tracerName).Start(ctx, "reaper.prune")
	defer span.End()
	out := map[string]int64{}
	var errs []error
	run := func(table string, del func(context.Context) (int64, error)) {
		for {
			n, err := del(ctx)
			if err != nil {
				errs = append(errs, err)
				return
			}
			p.observer.Pruned(table, n)
			out[table] += n
			if n < int64(p.cfg.Batch) || ctx.Err() != nil {
				return
			}
		}
	}
	run(TablePresence, func(ctx context.Context) (int64, error) { return p.store.SweepPresence(ctx, p.cfg.Batch) })
	if p.cfg.TopicSeenAge > 0 {
		run(TableTopicSeen, func(ctx context.Context) (int64, error) {
			return p.store.DeleteTopicSeen(ctx, p.cfg.TopicSeenAge, p.cfg.Batch)
		})
	}
	if p.cfg.AuditAge > 0 {
		run(TableControlEvents, func(ctx context.Context) (int64, error) {
			return p.store.DeleteControlEvents(ctx, p.cfg.AuditAge, p.cfg.Batch)
		})
	}
	for table, n := range out {
		span.SetAttributes(attribute.Int64("pulse.deleted."+table, n))
		if n > 0 {
			p.logger.Info("pruned rows", "table", table, "rows", n)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return out, err
}

func (nopObserver) Pruned(string, int64) {}
