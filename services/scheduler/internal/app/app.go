// Package app wires the scheduler: the pool and the admin HTTP server. The
// schedule loop (At / Every / Cron schedules turned into jobs, each fire
// exactly once) is not implemented yet; until it is, the scheduler only
// proves its operational surface.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/server/adminhttp"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/pgconn"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"
	"github.com/pulsequeue/pulse/services/scheduler/internal/config"
)

// Service is the name in logs, traces and application_name.
const Service = "scheduler"

// MinSchemaVersion is the oldest schema this build can run against. It
// moves to the schedules migration when the schedule loop lands.
const MinSchemaVersion = migrations.VersionJobs

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
	admin := adminhttp.New(cfg.AdminAddr, reg, logger)
	admin.AddReadinessCheck("database", pgconn.ReadinessCheck(pool, MinSchemaVersion))
	if err := admin.Start(); err != nil {
		return fmt.Errorf("admin http on %s (PULSE_ADMIN_ADDR): %w", cfg.AdminAddr, err)
	}
	logger.Warn("schedules are not implemented yet; this scheduler fires nothing")
	logger.Info("scheduler running", "admin_addr", admin.Addr())

	<-ctx.Done()

	logger.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	admin.SetNotServing()
	if err := admin.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.Canceled) {
		logger.Warn("admin http stop", "error", err)
	}
	logger.Info("stopped")
	return nil
}
