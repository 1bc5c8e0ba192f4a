// Package app builds the reaper's parts — the lease sweep, retention, the
// circuit breakers, the reindexer and the quiet window — for the service runtime (pkg/server/service), which runs them
// with the pool and the admin HTTP server.
package app

import (
	"context"
	"errors"
	"log/slog"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/loop"
	"github.com/pulsequeue/pulse/pkg/server/retrypolicy"
	"github.com/pulsequeue/pulse/pkg/server/service"
	"github.com/pulsequeue/pulse/services/reaper/internal/config"
	"github.com/pulsequeue/pulse/services/reaper/internal/quietwindow"
	"github.com/pulsequeue/pulse/services/reaper/internal/reapmetrics"
	"github.com/pulsequeue/pulse/services/reaper/internal/reindex"
	"github.com/pulsequeue/pulse/services/reaper/internal/retention"
	"github.com/pulsequeue/pulse/services/reaper/internal/sweep"
)

// Service is the name in logs, traces and application_name.
const Service = "reaper"

// MinSchemaVersion is the oldest schema this build can run against: job
// results, whose pulse_notify_settled wakes the waiters of a job the sweep
// dead-letters; the baseline before it, whose pulse_retry_delay (with the job's own policy) schedules a
// lapsed attempt's retry, whose job_throughput counts it, and whose
// control_events guard lets the pruner delete audit rows older than a day;
// jobs.snoozes (VersionSnooze), which a lapsed attempt's budget
// subtracts; and topic_breakers (VersionTopicBreakers), which the breaker
// loop judges.
const MinSchemaVersion = migrations.VersionTopicBreakers

// Command is the reaper binary.
func Command() service.Command[config.Config] {
	return service.EnvCommand(Service, `Routes jobs whose worker lease lapsed through the retry path and deletes
finished jobs past their retention age (an age of 0 keeps that status forever).`,
		func(c config.Config) string { return c.LogLevel }, Spec)
}

// Spec is the reaper as the runtime runs it. Shutdown stops both loops (a
// statement in flight is rolled back whole) after readiness flipped. The
// reaper ignores dispatch pause: pause gates claims only, and a lapsed
// lease must still be recovered.
func Spec(cfg config.Config, logger *slog.Logger) service.Spec {
	return service.Spec{
		Name: Service, Logger: logger,
		DatabaseURL: cfg.DatabaseURL, DBMaxConns: cfg.DBMaxConns, MinSchemaVersion: MinSchemaVersion,
		AdminAddr: cfg.AdminAddr, ShutdownTimeout: cfg.ShutdownTimeout,
		MetricsMaxTopics: cfg.MetricsMaxTopics, MetricsTopicIdle: cfg.MetricsTopicIdle,
		StartAttrs: []any{"sweep_interval", cfg.SweepInterval, "sweep_batch", cfg.SweepBatch,
			"retention_interval", cfg.RetentionInterval, "breaker_interval", cfg.BreakerInterval,
			"reindex_interval", cfg.ReindexInterval, "quiet_window", cfg.QuietWindow, "reaper_id", cfg.ReaperID},
		Build: func(ctx context.Context, s *service.Service) error {
			// The sweep counts what it settles in job_throughput under
			// this reaper's id.
			store := jobstore.New(s.Pool(), jobstore.ThroughputWriter(cfg.ReaperID))
			// The read side closes last, after every handler and loop using it.
			s.AddBackend("store", service.Closer(store.Close))
			if _, err := retrypolicy.Apply(ctx, store, cfg.RetryBackoffUnit, cfg.RetryBackoffMax,
				retrypolicy.Instance(Service, ""), s.Logger()); err != nil {
				return err
			}
			m := reapmetrics.New(s.Registry())
			m.BoundTopics(s.Topics())
			sweeper := sweep.NewLeaseSweeper(sweep.Config{Batch: cfg.SweepBatch}, store, m, s.Logger())
			cleaner := retention.NewJobCleaner(retention.Config{
				CompletedAge:    cfg.RetentionCompleted,
				CanceledAge:     cfg.RetentionCanceled,
				DeadLetteredAge: cfg.RetentionDeadLettered,
				Batch:           cfg.RetentionBatch,
			}, store, m, s.Logger())
			throughput := retention.NewThroughputCleaner(retention.ThroughputConfig{
				Age: cfg.ThroughputRetention, Batch: cfg.RetentionBatch,
			}, store, m, s.Logger())
			// All run at start, so a restarted reaper catches up at once.
			s.Every(loop.Config{Name: "lease_sweeper", Interval: cfg.SweepInterval, Immediate: true},
				func(ctx context.Context) error { _, err := sweeper.Sweep(ctx); return err })
			s.Every(loop.Config{Name: "job_cleaner", Interval: cfg.RetentionInterval, Immediate: true},
				func(ctx context.Context) error { _, err := cleaner.Clean(ctx); return err })
			s.Every(loop.Config{Name: "throughput_cleaner", Interval: cfg.RetentionInterval, Immediate: true},
				func(ctx context.Context) error { _, err := throughput.Clean(ctx); return err })
			// The circuit breakers (ADR-0053): any number of reapers may
			// judge them; each transition happens once.
			s.Every(loop.Config{Name: "breaker", Interval: cfg.BreakerInterval, Immediate: true},
				func(ctx context.Context) error { return judgeBreakers(ctx, store, m, s.Logger()) })
			// The reindexer (ADR-0070; on by default, ADR-0075): on a
			// connection of its own, one reaper at a time; after an
			// interval, not at start, so a fleet restarting does not
			// read the catalog all at once.
			if cfg.ReindexInterval > 0 {
				reindexer := reindex.NewReindexer(reindex.Config{
					Bloat: cfg.ReindexBloat, MinFreed: cfg.ReindexMinFreedMB << 20,
					OldestSnapshot: reindex.OldestSnapshot, VacuumWait: reindex.VacuumWait,
				}, reindex.StoreOpener(store, jobstore.ReindexLockTimeout), reindex.StoreWatcher(store), m, s.Logger())
				s.Every(loop.Config{Name: "reindexer", Interval: cfg.ReindexInterval},
					func(ctx context.Context) error { _, err := reindexer.Pass(ctx); return err })
			}
			// The quiet window (ADR-0074), when a bound turns it on: any
			// number of reapers may look; the gate closes for one at a time.
			if cfg.QuietWindow > 0 {
				if ok, err := store.QuietWindowVisible(ctx); err != nil {
					return err
				} else if !ok {
					s.Logger().WarnContext(ctx, "quiet window: this role cannot see autovacuum's progress, so no window will open; grant it pg_read_all_stats (or pg_monitor)")
				}
				keeper := quietwindow.NewKeeper(cfg.QuietWindow, store, m, s.Logger())
				s.Every(loop.Config{Name: "quiet_window", Interval: quietwindow.Look}, keeper.Tick)
			}
			return nil
		},
	}
}

// judgeBreakers runs one evaluation of every topic's circuit breaker,
// logs each transition and exports the breakers' states.
func judgeBreakers(ctx context.Context, store *jobstore.Store, m *reapmetrics.Metrics, logger *slog.Logger) error {
	trs, err := store.EvaluateBreakers(ctx)
	for _, tr := range trs {
		logger.InfoContext(ctx, "circuit breaker "+string(tr.To), "topic", tr.Topic, "from", string(tr.From), "why", tr.Why)
	}
	states, serr := store.Breakers(ctx)
	if serr != nil {
		states = nil
	}
	m.Breakers(trs, states, errors.Join(err, serr))
	return errors.Join(err, serr)
}
