// Package app builds the scheduler's parts — the fire loop (At / Every /
// Cron schedules turned into jobs, each occurrence exactly once; see
// internal/fire) and its subscription to pulse_schedules_changed — for the
// service runtime (pkg/server/service).
package app

import (
	"context"
	"log/slog"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pglisten"
	"github.com/pulsequeue/pulse/pkg/server/service"
	"github.com/pulsequeue/pulse/services/scheduler/internal/config"
	"github.com/pulsequeue/pulse/services/scheduler/internal/fire"
)

// Service is the name in logs, traces and application_name.
const Service = "scheduler"

// MinSchemaVersion is the oldest schema this build can run against: job
// tags, rate keys, concurrency and sequence keys, columns of the insert it
// fires schedules' jobs with (VersionConcurrencyKeys); the baseline before
// it holds schedules and the jobs they fire.
const MinSchemaVersion = migrations.VersionConcurrencyKeys

// Command is the scheduler binary.
func Command() service.Command[config.Config] {
	return service.EnvCommand(Service, `Turns schedules into jobs, each occurrence exactly once; serves /metrics,
/healthz and /readyz.`,
		func(c config.Config) string { return c.LogLevel }, Spec)
}

// Spec is the scheduler as the runtime runs it.
func Spec(cfg config.Config, logger *slog.Logger) service.Spec {
	return service.Spec{
		Name: Service, Logger: logger,
		DatabaseURL: cfg.DatabaseURL, DBMaxConns: cfg.DBMaxConns, MinSchemaVersion: MinSchemaVersion,
		AdminAddr: cfg.AdminAddr, ShutdownTimeout: cfg.ShutdownTimeout,
		MetricsMaxTopics: cfg.MetricsMaxTopics, MetricsTopicIdle: cfg.MetricsTopicIdle,
		StartAttrs: []any{"reconcile", cfg.ScheduleReconcile},
		Build: func(_ context.Context, s *service.Service) error {
			store := jobstore.New(s.Pool(), jobstore.LogWakeErrors(s.Logger()))
			// The read side closes last, after the loop using it.
			s.AddBackend("store", service.Closer(store.Close))
			m := fire.NewMetrics(s.Registry())
			m.BoundTopics(s.Topics())
			loop := fire.New(fire.Config{Batch: cfg.ScheduleBatch, Reconcile: cfg.ScheduleReconcile},
				store, m, s.Logger())
			s.Add("fire", service.Go(loop.Run))
			// A change wakes the loop at once; after a reconnect, so does
			// the resync (changes meanwhile went unnoticed).
			s.Listener().Handle(jobstore.SchedulesChannel, pglisten.Handler{
				Notify: func(string) { loop.Wake() },
				Resync: loop.Wake,
			})
			return nil
		},
	}
}
