// Package app wires the reaper: the pool, the lease sweeper, the job
// cleaner and the admin HTTP server.
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
	"github.com/pulsequeue/pulse/pkg/server/retrypolicy"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"
	"github.com/pulsequeue/pulse/services/reaper/internal/config"
	"github.com/pulsequeue/pulse/services/reaper/internal/reapmetrics"
	"github.com/pulsequeue/pulse/services/reaper/internal/retention"
	"github.com/pulsequeue/pulse/services/reaper/internal/sweep"
)

// Service is the name in logs, traces and application_name.
const Service = "reaper"

// MinSchemaVersion is the oldest schema this build can run against: the
// sweep schedules a lapsed attempt's retry with pulse_retry_delay.
const MinSchemaVersion = migrations.VersionRetryPolicy

// Run sweeps and prunes until ctx is done, then shuts down in order: report
// not ready, stop both loops (a statement in flight is rolled back whole),
// stop the admin server, close the pool. The reaper ignores dispatch pause:
// pause gates claims only, and a lapsed lease must still be recovered.
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
	store := jobstore.New(pool)
	if _, err := retrypolicy.Apply(ctx, store, cfg.RetryBackoffUnit, cfg.RetryBackoffMax,
		retrypolicy.Instance(Service, ""), logger); err != nil {
		return err
	}

	reg := metrics.NewRegistry(Service)
	pgconn.RegisterPoolMetrics(reg, pool)
	m := reapmetrics.New(reg)
	sweeper := sweep.NewLeaseSweeper(sweep.Config{
		Interval: cfg.SweepInterval,
		Batch:    cfg.SweepBatch,
	}, store, m, logger)
	cleaner := retention.NewJobCleaner(retention.Config{
		Interval:        cfg.RetentionInterval,
		CompletedAge:    cfg.RetentionCompleted,
		CanceledAge:     cfg.RetentionCanceled,
		DeadLetteredAge: cfg.RetentionDeadLettered,
		Batch:           cfg.RetentionBatch,
	}, store, m, logger)

	admin := adminhttp.New(cfg.AdminAddr, reg, logger)
	admin.AddReadinessCheck("database", pgconn.ReadinessCheck(pool, MinSchemaVersion))
	if err := admin.Start(); err != nil {
		return fmt.Errorf("admin http on %s (PULSE_ADMIN_ADDR): %w", cfg.AdminAddr, err)
	}

	loopCtx, stopLoops := context.WithCancel(context.Background())
	defer stopLoops()
	var loops sync.WaitGroup
	loops.Add(2)
	go func() { defer loops.Done(); sweeper.Run(loopCtx) }()
	go func() { defer loops.Done(); cleaner.Run(loopCtx) }()
	logger.Info("reaper running", "admin_addr", admin.Addr(),
		"sweep_interval", cfg.SweepInterval, "sweep_batch", cfg.SweepBatch,
		"retention_interval", cfg.RetentionInterval)

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
