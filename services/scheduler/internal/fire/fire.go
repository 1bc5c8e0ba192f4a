// Package fire is the scheduler's loop: it turns due schedules into jobs,
// each occurrence exactly once across any number of replicas.
//
// Each pass runs jobstore.Store.FireDue: due rows (enabled, next_run_at <=
// now) are locked FOR UPDATE SKIP LOCKED, one ordinary job is inserted per
// schedule with the id jobstore.OccurrenceJobID(schedule, occurrence) (ON
// CONFLICT DO NOTHING makes a re-fire a no-op) and the cursor moves by
// compare-and-set on next_run_at, all in one transaction.
//
// Missed occurrences: after downtime a schedule fires its latest missed
// occurrence once (schedule.Latest), not a burst; the cursor then moves to
// the first occurrence after now.
//
// Waking: the loop sleeps until the earliest next_run_at, but never longer
// than Config.Reconcile (1s by default), and wakes at once on Wake, which
// the app calls on every NOTIFY on pulse_schedules_changed (a trigger on
// schedules sends it; the process's one LISTEN connection, pglisten,
// receives it) and after the listener reconnects. It does not
// look at dispatch pause: a paused fleet still gets its scheduled jobs,
// which simply queue.
package fire

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/schedule"
)

// Store is what the loop needs of jobstore.Store.
type Store interface {
	FireDue(ctx context.Context, now time.Time, limit int, plan func(*jobstore.Schedule) jobstore.Fire) ([]jobstore.Fired, error)
	NextScheduleDue(ctx context.Context) (time.Time, bool, error)
	CountSchedules(ctx context.Context, now time.Time) (jobstore.ScheduleCounts, error)
}

// Observer is told about each fire and each pass, for metrics.
type Observer interface {
	// Fired reports one job inserted for occurrence, lag after it.
	Fired(topic string, lag time.Duration)
	// Skipped reports a fire that skipped missed occurrences: the
	// schedule's cursor was due before the occurrence fired.
	Skipped(topic string)
	// Counted reports the schedules gauge.
	Counted(c jobstore.ScheduleCounts)
}

// Config tunes the loop.
type Config struct {
	// Batch is the most schedules one transaction fires.
	Batch int
	// Reconcile caps every sleep, so a missed NOTIFY costs at most this
	// long; 0 means ReconcileDefault.
	Reconcile time.Duration
}

// MissedOccurrencesMsg is the log line of a fire that skipped missed
// occurrences: its missed_from is the first occurrence that never fired,
// its occurrence the one that did (schedule.Latest: after downtime a
// schedule fires its latest missed occurrence once, not a burst).
const MissedOccurrencesMsg = "schedule missed occurrences; fired the latest once"

// ReconcileDefault is the longest the loop sleeps without looking.
const ReconcileDefault = time.Second

// Loop fires due schedules until its context ends.
type Loop struct {
	cfg      Config
	store    Store
	observer Observer
	logger   *slog.Logger
	wake     chan struct{}
}

// New builds a loop; observer may be nil.
func New(cfg Config, store Store, observer Observer, logger *slog.Logger) *Loop {
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.Reconcile <= 0 {
		cfg.Reconcile = ReconcileDefault
	}
	if observer == nil {
		observer = nopObserver{}
	}
	return &Loop{cfg: cfg, store: store, observer: observer, logger: logger.With(logging.Loop, "fire"), wake: make(chan struct{}, 1)}
}

// Wake makes the loop look now (a schedule changed). It never blocks.
func (l *Loop) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run fires, sleeps until the next due schedule (at most Reconcile) or a
// Wake, and repeats until ctx is done. Errors are logged and retried on
// the next pass.
func (l *Loop) Run(ctx context.Context) {
	l.logger.Info("schedule loop started", "reconcile", l.cfg.Reconcile, "batch", l.cfg.Batch)
	for {
		if _, err := l.Pass(ctx); err != nil && ctx.Err() == nil {
			l.logger.Error("schedule pass failed; retrying", logging.Error, err)
		}
		t := time.NewTimer(l.nextWait(ctx))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-l.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// nextWait is how long to sleep: until the earliest next_run_at, at most
// Reconcile.
func (l *Loop) nextWait(ctx context.Context) time.Duration {
	wait := l.cfg.Reconcile
	if next, ok, err := l.store.NextScheduleDue(ctx); err == nil && ok {
		if d := time.Until(next); d < wait {
			wait = max(d, 0)
		}
	}
	return wait
}

// Pass fires every schedule due now, batch after batch, and returns how
// many jobs it inserted.
func (l *Loop) Pass(ctx context.Context) (int, error) {
	total := 0
	for {
		now := time.Now()
		fired, err := l.store.FireDue(ctx, now, l.cfg.Batch, func(sc *jobstore.Schedule) jobstore.Fire {
			return l.plan(ctx, sc, now)
		})
		if err != nil {
			return total, err
		}
		inserted := time.Now()
		for _, f := range fired {
			sc := f.Schedule
			if f.Fire.Skip {
				continue
			}
			if f.Inserted && f.CursorMove {
				total++
				lag := inserted.Sub(f.Fire.Occurrence)
				l.observer.Fired(sc.Topic, lag)
				l.logger.Info("schedule fired", "schedule", sc.Name, "schedule_id", sc.ID, logging.Topic, sc.Topic,
					logging.JobID, f.Fire.Job.ID, "occurrence", f.Fire.Occurrence, "lag", lag)
				if sc.NextRunAt != nil && f.Fire.Occurrence.After(*sc.NextRunAt) {
					// No scheduler fired the cursor's occurrence in time (every
					// replica down or stalled longer than the period): the
					// latest one fired once, the ones from the cursor up to it
					// never will.
					l.observer.Skipped(sc.Topic)
					l.logger.Warn(MissedOccurrencesMsg, "schedule", sc.Name, "schedule_id", sc.ID, logging.Topic, sc.Topic,
						"missed_from", *sc.NextRunAt, "occurrence", f.Fire.Occurrence)
				}
			} else {
				l.logger.Info("occurrence already fired; no-op", "schedule", sc.Name, "occurrence", f.Fire.Occurrence)
			}
		}
		if len(fired) < l.cfg.Batch || ctx.Err() != nil {
			break
		}
	}
	if c, err := l.store.CountSchedules(ctx, time.Now()); err == nil {
		l.observer.Counted(c)
	}
	return total, nil
}

// plan decides one due schedule's fire: the latest occurrence at or
// before now, a job with its deterministic id whose trace context is the
// fire span's, and the next cursor.
func (l *Loop) plan(ctx context.Context, sc *jobstore.Schedule, now time.Time) jobstore.Fire {
	s, err := schedule.Parse(sc.Kind, sc.Expression, sc.TimeZone)
	if err != nil {
		// Validated on write, so only a hand-edited row gets here; stop it
		// rather than retry it every pass.
		l.logger.Error("schedule does not parse; stopping it", "schedule", sc.Name, logging.Error, err)
		return jobstore.Fire{Skip: true, Occurrence: *sc.NextRunAt}
	}
	if sc.NextRunAt == nil || sc.NextRunAt.IsZero() {
		// A cursor at the zero time (a cron expression that never fires,
		// stored before such expressions were refused) would fire at once
		// with a zero occurrence; stop the schedule instead.
		l.logger.Error("schedule has no next occurrence; stopping it", "schedule", sc.Name, "expression", sc.Expression)
		return jobstore.Fire{Skip: true}
	}
	occ, next := schedule.Latest(s, *sc.NextRunAt, now)
	if occ.IsZero() {
		l.logger.Error("schedule has no occurrence; stopping it", "schedule", sc.Name, "expression", sc.Expression)
		return jobstore.Fire{Skip: true}
	}
	ctx, span := otel.Tracer(tracerName).Start(ctx, "scheduler.fire")
	span.SetAttributes(attribute.String("pulse.schedule_id", sc.ID.String()), attribute.String("pulse.topic", sc.Topic))
	defer span.End()
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	id := sc.ID
	f := jobstore.Fire{
		Occurrence: occ,
		Job: pulsetype.NewJob{
			ID: jobstore.OccurrenceJobID(sc.ID, occ), Topic: sc.Topic, Args: sc.Args,
			Priority: sc.Priority, MaxAttempts: sc.MaxAttempts, RunAt: occ, ScheduleID: &id,
			TraceParent: carrier.Get("traceparent"), TraceState: carrier.Get("tracestate"),
		},
	}
	if !next.IsZero() {
		f.Next = &next
	}
	return f
}

const tracerName = "github.com/pulsequeue/pulse/services/scheduler/internal/fire"

type nopObserver struct{}

func (nopObserver) Fired(string, time.Duration)     {}
func (nopObserver) Counted(jobstore.ScheduleCounts) {}
func (nopObserver) Skipped(string)                  {}
