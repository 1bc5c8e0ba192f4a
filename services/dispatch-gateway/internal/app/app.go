// Package app builds the dispatch-gateway's parts — the dispatcher loop,
// the pause gate and its refresher, worker presence, the gRPC
// DispatchService, and their subscriptions to the process's LISTEN
// connection — for the service runtime (pkg/server/service).
package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pulsequeue/pulse/migrations"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pglisten"
	"github.com/pulsequeue/pulse/pkg/server/retrypolicy"
	"github.com/pulsequeue/pulse/pkg/server/service"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/api"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/config"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/gwmetrics"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/pause"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/presence"
)

// Service is the name in logs, traces and application_name.
const Service = "dispatch-gateway"

// MinSchemaVersion is the oldest schema this build can run against: job
// progress and metadata, which its UpdateProgress writes; job results
// before it, which its report stores and whose waiters it wakes. It records its streams in worker_presence, its report
// schedules a failed attempt's retry with pulse_retry_delay and the job's
// own policy, counts settled attempts in job_throughput, and its claim
// reads jobs.timeout and topic_limits; a snooze needs jobs.snoozes
// (VersionSnooze); its claim walks jobs_claim_idx without blocked jobs
// (blocked_by = 0, VersionJobDependencies); its claim of a rate-limited
// topic reads and writes the rate limits' sliding log (VersionRateLimits);
// its claim of a keyed topic reads the per-key limits, the keyed indexes
// and the rotation's cursor (VersionConcurrencyKeys).
const MinSchemaVersion = migrations.VersionConcurrencyKeys

// Command is the dispatch-gateway binary.
func Command() service.Command[config.Config] {
	return service.EnvCommand(Service, "Serves DispatchService (StreamJobs, Heartbeat, ReportResult) to workers.",
		func(c config.Config) string { return c.LogLevel }, Spec)
}

// Spec is the gateway as the runtime runs it. It serves no gRPC until the
// pause state is known (the refresher's prime is a start step). Shutdown,
// after readiness flipped: stop claiming (the dispatcher and the
// listener), then end the open streams (workers reconnect elsewhere; no
// job is claimed for a stream about to close, and jobs already sent keep
// running on their workers, which report to any replica), then let
// in-flight calls finish as the gRPC listener stops; presence outlives the
// streams, deleting their rows as they close.
func Spec(cfg config.Config, logger *slog.Logger) service.Spec {
	return service.Spec{
		Name: Service, Logger: logger,
		DatabaseURL: cfg.DatabaseURL, DBMaxConns: cfg.DBMaxConns, MinSchemaVersion: MinSchemaVersion,
		AdminAddr: cfg.AdminAddr, GRPCAddr: cfg.GRPCAddr, ShutdownTimeout: cfg.ShutdownTimeout,
		MetricsMaxTopics: cfg.MetricsMaxTopics, MetricsTopicIdle: cfg.MetricsTopicIdle,
		StartAttrs: []any{"gateway_id", cfg.GatewayID, "lease_ttl", cfg.LeaseTTL, "poll_interval", cfg.PollInterval},
		Build:      func(ctx context.Context, s *service.Service) error { return build(ctx, cfg, s) },
	}
}

func build(ctx context.Context, cfg config.Config, s *service.Service) error {
	logger := s.Logger()
	sec, err := cfg.Security()
	if err != nil {
		return err
	}
	sec.Warn(logger)
	authn, tlsCfg := sec.Authenticator, sec.TLS
	// The report statement counts what it settles in job_throughput under
	// this gateway's id.
	store := jobstore.New(s.Pool(), jobstore.ThroughputWriter(cfg.GatewayID))
	// The read side closes last, after every handler and loop using it.
	s.AddBackend("store", service.Closer(store.Close))
	if _, err := retrypolicy.Apply(ctx, store, cfg.RetryBackoffUnit, cfg.RetryBackoffMax,
		retrypolicy.Instance(Service, cfg.GatewayID), logger); err != nil {
		return err
	}

	dispatcher := dispatch.NewLanes(cfg.ClaimLanes, dispatch.DispatcherConfig{
		LeaseTTL: cfg.LeaseTTL, PollInterval: cfg.PollInterval, Batch: cfg.ClaimBatch, ClaimCooldown: cfg.ClaimCooldown,
		ClaimRescanInterval: cfg.ClaimRescanInterval,
	}, store, nil, logger)
	m := gwmetrics.New(s.Registry(), dispatcher.Registry().Stats)
	authn.OnRefusal(m.AuthRefused)
	m.BoundTopics(s.Topics())
	dispatcher.SetObserver(m)

	// Pause: the gate the dispatcher and the streams read, kept current by
	// NOTIFY and polling (docs/pause.md).
	gate := pause.NewGate()
	dispatcher.SetGate(gate)
	refresher := pause.NewRefresher(gate, store, pause.RefresherConfig{
		Interval: cfg.PauseRefreshInterval,
		OnChange: dispatcher.JobsReady,
		Observer: m,
	}, logger)

	// Presence: this replica's streams in worker_presence (ADR-0012).
	tracker := presence.New(store, presence.Config{
		Gateway: cfg.GatewayID, Interval: cfg.PresenceInterval, TTL: cfg.PresenceTTL, OnError: m.PresenceFailed,
	}, logger)
	s.AddBackend("presence", service.Go(tracker.Run))

	svc := api.NewDispatchService(api.Config{
		GatewayID:         cfg.GatewayID,
		LeaseTTL:          cfg.LeaseTTL,
		HeartbeatInterval: cfg.HeartbeatInterval,
		Pause:             gate,
		BindLeases:        authn != nil,
		Presence:          tracker,

		MaxStreamsPerIdentity: cfg.MaxStreamsPerIdentity,
		MaxResultBytes:        cfg.MaxResultBytes,
	}, store, dispatcher.Registry(), m, logger)
	grpcSrv := s.GRPC(grpcserver.Options{
		Admit:             auth.TapHandle(authn, api.AccessPolicy()),
		DisableReflection: !cfg.GRPCReflection,
		ServerOptions:     auth.GRPCServerOptions(tlsCfg),
	})
	pulsev1.RegisterDispatchServiceServer(grpcSrv.GRPC(), svc)
	s.Admin().AddReadinessCheck("dispatch_gate", gate.ReadinessCheck)
	// The admin port: probes public, /metrics public unless
	// PULSE_METRICS_AUTH (then any role's credentials).
	s.Admin().Use(auth.Middleware(authn, auth.HTTPPolicy(auth.AdminPolicy(cfg.MetricsAuth))))

	// Workers, stopped last added first: the listener and the dispatcher
	// stop claiming, the refresher stops, then the streams end.
	s.Add("streams", service.Funcs{StopFunc: func(context.Context) error { svc.Shutdown(); return nil }})
	// Boot is fail-safe: no gRPC until the pause state is known.
	s.Add("pause_prime", service.Funcs{StartFunc: func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, pause.PrimeTimeoutDefault)
		defer cancel()
		if err := refresher.Prime(pctx); err != nil {
			return fmt.Errorf("refusing to serve: %w", err)
		}
		return nil
	}})
	s.Add("pause_refresher", service.Go(refresher.Run))
	s.Add("dispatcher", service.Go(dispatcher.Run))

	// One LISTEN connection for both channels; after a reconnect each
	// subscriber reconciles (a claim pass, a pause-state read).
	s.Listener().Handle(jobstore.ReadyChannel, pglisten.Handler{
		Notify: dispatcher.TopicReady,
		Resync: dispatcher.JobsReady,
	})
	s.Listener().Handle(jobstore.DispatchControlChannel, pglisten.Handler{
		Notify: func(string) { refresher.Kick() },
		Resync: refresher.Kick,
	})
	return nil
}
