// Package app wires the scheduler: the pool, the fire loop (At / Every /
// Cron schedules turned into jobs, each occurrence exactly once; see
// internal/fire), its NOTIFY listener and the admin HTTP server.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/server/adminhttp"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/pgconn"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"
	"github.com/pulsequeue/pulse/services/scheduler/internal/config"
	"github.com/pulsequeue/pulse/services/scheduler/internal/fire"
)

// Service is the name in logs, traces and application_name.
const Service = "scheduler"

// MinSchemaVersion is the oldest schema this build can run against.
const MinSchemaVersion = migrations.VersionSchedules

// Run serves the admin surface until ctx is done, then shuts down: report
// not ready, stop the admin server, close the pool.
func Run(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	shutdownTracing, err := telemetry.SetupTracing(ctx, Service, "dev")
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer shutdownTracing(context.Background())

	pool, err := pgconn.Open(ctx, pgconn.Options{
		URL: cfg.DatabaseURL, Service: Service, MinSchemaVersion: MinSchemaVersion,
		MaxConns: cfg.DBMaxConns, Logger: logger,
	})
	if err != nil {
		return err
	}
	defer pool.Close()

	reg := metrics.NewRegistry(Service)
	pgconn.RegisterPoolMetrics(reg, pool)
	loop := fire.New(fire.Config{Batch: cfg.ScheduleBatch, Reconcile: cfg.ScheduleReconcile},
		jobstore.New(pool), fire.NewMetrics(reg), logger)
	admin := adminhttp.New(cfg.AdminAddr, reg, logger)
	admin.AddReadinessCheck("database", pgconn.ReadinessCheck(pool, MinSchemaVersion))
	if err := admin.Start(); err != nil {
		return fmt.Errorf("admin http on %s (PULSE_ADMIN_ADDR): %w", cfg.AdminAddr, err)
	}
	loopCtx, stopLoops := context.WithCancel(context.Background())
	defer stopLoops()
	var loops sync.WaitGroup
	loops.Go(func() { loop.Run(loopCtx) })
	loops.Go(func() { fire.Listen(loopCtx, pool, loop.Wake, logger) })
	logger.Info("scheduler running", "admin_addr", admin.Addr(), "reconcile", cfg.ScheduleReconcile)

	<-ctx.Done()

	logger.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	admin.SetNotServing()
	stopLoops()
	stopped := make(chan struct{})
	go func() { loops.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-shutdownCtx.Done():
		logger.Warn("loops did not stop within PULSE_SHUTDOWN_TIMEOUT; closing anyway")
	}
	if err := admin.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.Canceled) {
		logger.Warn("admin http stop", "error", err)
	}
	logger.Info("stopped")
	return nil
}
