// Package app wires the dispatch-gateway: the pool, the dispatcher loop and
// its NOTIFY listener, the gRPC DispatchService and the admin HTTP server.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"

	"github.com/pulsequeue/pulse/migrations"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/adminhttp"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/pgconn"
	"github.com/pulsequeue/pulse/pkg/server/retrypolicy"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/api"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/config"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/gwmetrics"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/pause"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/presence"
)

// Service is the name in logs, traces and application_name.
const Service = "dispatch-gateway"

// MinSchemaVersion is the oldest schema this build can run against: it
// records its streams in worker_presence, its report schedules a failed
// attempt's retry with pulse_retry_delay, and its claim reads
// jobs.timeout.
const MinSchemaVersion = migrations.VersionJobTimeoutAndUniques

// Run serves until ctx is done, then shuts down in order: stop taking
// streams and end the open ones (workers reconnect elsewhere), stop
// claiming, let in-flight reports finish, close the pool.
func Run(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	authn, tlsCfg, err := cfg.Security()
	if err != nil {
		return err
	}
	if authn == nil {
		auth.LogOpenMode(logger)
	}
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
		retrypolicy.Instance(Service, cfg.GatewayID), logger); err != nil {
		return err
	}

	reg := metrics.NewRegistry(Service)
	pgconn.RegisterPoolMetrics(reg, pool)
	dispatcher := dispatch.NewDispatcher(dispatch.DispatcherConfig{
		LeaseTTL: cfg.LeaseTTL, PollInterval: cfg.PollInterval, Batch: cfg.ClaimBatch,
	}, store, nil, logger)
	m := gwmetrics.New(reg, dispatcher.Registry().Stats)
	dispatcher.SetObserver(m)

	// Pause: the gate the dispatcher and the streams read, kept current by
	// NOTIFY and polling (docs/pause.md).
	gate := pause.NewGate()
	dispatcher.SetGate(gate)
	refresher := pause.NewRefresher(gate, store, pause.RefresherConfig{
		Interval: cfg.PauseRefreshInterval,
		Listen: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		},
		OnChange: dispatcher.JobsReady,
		Observer: m,
	}, logger)

	listener := dispatch.NewListener(func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	}, dispatcher.JobsReady, logger)

	// Presence: this replica's streams in worker_presence (ADR-0012).
	tracker := presence.New(store, presence.Config{
		Gateway: cfg.GatewayID, Interval: cfg.PresenceInterval, TTL: cfg.PresenceTTL, OnError: m.PresenceFailed,
	}, logger)

	svc := api.NewDispatchService(api.Config{
		GatewayID:         cfg.GatewayID,
		LeaseTTL:          cfg.LeaseTTL,
		HeartbeatInterval: cfg.HeartbeatInterval,
		Pause:             gate,
		BindLeases:        authn != nil,
		Presence:          tracker,
	}, store, dispatcher.Registry(), m, logger)

	grpcSrv := grpcserver.New(grpcserver.Options{
		Logger: logger, Metrics: metrics.GRPCServerMetrics(reg),
		ExtraUnary:    []grpc.UnaryServerInterceptor{auth.UnaryInterceptor(authn, api.AccessPolicy())},
		ExtraStream:   []grpc.StreamServerInterceptor{auth.StreamInterceptor(authn, api.AccessPolicy())},
		ServerOptions: auth.GRPCServerOptions(tlsCfg),
	})
	pulsev1.RegisterDispatchServiceServer(grpcSrv.GRPC(), svc)

	admin := adminhttp.New(cfg.AdminAddr, reg, logger)
	admin.AddReadinessCheck("database", pgconn.ReadinessCheck(pool, MinSchemaVersion))
	admin.AddReadinessCheck("dispatch_gate", gate.ReadinessCheck)
	if err := admin.Start(); err != nil {
		return fmt.Errorf("admin http on %s (PULSE_ADMIN_ADDR): %w", cfg.AdminAddr, err)
	}
	// Boot is fail-safe: no gRPC until the pause state is known.
	primeCtx, cancelPrime := context.WithTimeout(ctx, pause.PrimeTimeoutDefault)
	err = refresher.Prime(primeCtx)
	cancelPrime()
	if err != nil {
		_ = admin.Shutdown(context.Background())
		return fmt.Errorf("refusing to serve: %w", err)
	}
	lis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("grpc listen on %s (PULSE_GRPC_ADDR): %w", cfg.GRPCAddr, err)
	}

	loopCtx, stopLoops := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	loops.Add(3)
	go func() { defer loops.Done(); dispatcher.Run(loopCtx) }()
	go func() { defer loops.Done(); listener.Run(loopCtx) }()
	go func() { defer loops.Done(); refresher.Run(loopCtx) }()
	// Presence outlives the streams: it deletes their rows as they close
	// on shutdown, so it stops after them.
	presenceCtx, stopPresence := context.WithCancel(context.Background())
	presenceDone := make(chan struct{})
	go func() { defer close(presenceDone); tracker.Run(presenceCtx) }()

	serveErr := make(chan error, 1)
	go func() { serveErr <- grpcSrv.Serve(lis) }()
	logger.Info("dispatch-gateway serving", "grpc_addr", lis.Addr().String(), "admin_addr", admin.Addr(),
		"gateway_id", cfg.GatewayID, "lease_ttl", cfg.LeaseTTL, "poll_interval", cfg.PollInterval)

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("grpc serve: %w", err)
	}

	logger.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	admin.SetNotServing()
	// Stop claiming first, then end the streams: no job is claimed for a
	// stream that is about to close. Jobs already sent keep running on their
	// workers, which report to any replica.
	stopLoops()
	loops.Wait()
	svc.Drain()
	if err := grpcSrv.Stop(shutdownCtx); err != nil {
		logger.Warn("grpc stop", "error", err)
	}
	stopPresence()
	<-presenceDone
	if err := admin.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.Canceled) {
		logger.Warn("admin http stop", "error", err)
	}
	logger.Info("stopped")
	return runErr
}
