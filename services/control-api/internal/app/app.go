package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"github.com/pulsequeue/pulse/migrations"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/adminhttp"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/pgconn"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/config"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
	"github.com/pulsequeue/pulse/services/control-api/internal/pauseexpiry"
	"github.com/pulsequeue/pulse/services/control-api/internal/queuedepth"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit"
	"github.com/pulsequeue/pulse/services/control-api/internal/ui"
)

// Service is the name control-api reports in logs, metrics, traces and
// pg_stat_activity.
const Service = "control-api"

// Version is stamped at build time (-ldflags "-X ...app.Version=v1.2.3").
var Version = "dev"

// MinSchemaVersion is the oldest schema control-api runs on: explaining a
// waiting job reads worker_presence; a submit writes jobs.timeout and
// claims unique keys in job_uniques.
const MinSchemaVersion = migrations.VersionJobTimeoutAndUniques

// Run serves control-api until ctx is done, then shuts down gracefully
// within cfg.ShutdownTimeout.
func Run(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	shutdownTracing, err := telemetry.SetupTracing(ctx, Service, Version)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			logger.Warn("flush traces", logging.Error, err)
		}
	}()

	a, err := New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		a.Stop(context.WithoutCancel(ctx))
		return err
	}
	logger.Info("control-api serving", "http_addr", a.HTTPAddr(), "grpc_addr", a.GRPCAddr(), "version", Version)

	var serveErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	case serveErr = <-a.serveErr:
		logger.Error("grpc server failed; shutting down", logging.Error, serveErr)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	stopErr := a.Stop(sctx)
	if err := errors.Join(serveErr, stopErr); err != nil {
		return err
	}
	logger.Info("stopped cleanly")
	return nil
}

// App is a wired control-api, not yet serving.
type App struct {
	cfg    config.Config
	logger *slog.Logger

	pool      *pgxpool.Pool
	store     *jobstore.Store
	coalescer *submit.Coalescer
	expiry    *pauseexpiry.Sweeper
	depth     *queuedepth.Refresher
	grpc      *grpcserver.Server
	admin     *adminhttp.Server

	grpcLis  net.Listener
	serveErr chan error
	served   sync.WaitGroup
}

// New connects to the database (waiting for it, refusing an old schema)
// and builds every part.
func New(ctx context.Context, cfg config.Config, logger *slog.Logger) (*App, error) {
	authn, tlsCfg, err := cfg.Security()
	if err != nil {
		return nil, err
	}
	if authn == nil {
		auth.LogOpenMode(logger)
	}
	pool, err := pgconn.Open(ctx, pgconn.Options{
		URL:              cfg.DatabaseURL,
		Service:          Service,
		MinSchemaVersion: MinSchemaVersion,
		MaxConns:         cfg.DBMaxConns,
		Logger:           logger,
	})
	if err != nil {
		return nil, err
	}
	store := jobstore.New(pool)
	reg := metrics.NewRegistry(Service)
	pgconn.RegisterPoolMetrics(reg, pool)
	m := api.NewMetrics(reg)

	coalescer := submit.NewCoalescer(store, submit.Options{
		MaxBatch: cfg.SubmitCoalesceMax,
		Flushers: cfg.SubmitFlushers,
		OnFlush:  func(rows int) { m.InsertRows.Observe(float64(rows)) },
		Logger:   logger,
	})
	svc := api.NewControlService(store, coalescer, api.Options{
		Limits:       jobspec.Limits{MaxArgsBytes: cfg.MaxArgsBytes},
		MaxBatchJobs: cfg.MaxBatchJobs,
		Metrics:      m,
	})

	jsonAPI := httpapi.New(svc, httpapi.Options{
		MaxArgsBytes: cfg.MaxArgsBytes,
		Logger:       logger,
	})
	dispatchSvc := api.NewDispatchControl(store, api.DispatchOptions{Metrics: m, Logger: logger})
	scheduleSvc := api.NewSchedules(store, nil, logger)
	dashboard := ui.New(svc, dispatchSvc, scheduleSvc, ui.Options{
		TraceURL: cfg.UITraceURL, Refresh: cfg.UIRefresh, Logger: logger,
	})

	admin := adminhttp.New(cfg.HTTPAddr, reg, logger)
	// The dashboard answers its own refusals with a page; the API with JSON.
	admin.Use(auth.Middleware(authn, auth.HTTPPolicy(AccessPolicy()), dashboard.WriteAuthError))
	// Outermost: a browser's state-changing request from another origin is
	// refused before anything else runs, on every route (the JSON API's as
	// well as the dashboard's), so a foreign page cannot act with an
	// operator's Basic credentials.
	admin.Use(auth.CrossOrigin(dashboard.WriteAuthError))
	admin.SetTLS(tlsCfg)
	jsonAPI.Register(admin)
	jsonAPI.RegisterDispatch(admin, dispatchSvc)
	jsonAPI.RegisterSchedules(admin, scheduleSvc)
	dashboard.Register(admin)
	admin.AddReadinessCheck("database", pgconn.ReadinessCheck(pool, MinSchemaVersion))

	grpcSrv := grpcserver.New(grpcserver.Options{
		Logger:  logger,
		Metrics: metrics.GRPCServerMetrics(reg),
		// A batch may be as large over gRPC as over HTTP.
		ServerOptions: append([]grpc.ServerOption{grpc.MaxRecvMsgSize(int(jsonAPI.BatchBodyLimit()))}, auth.GRPCServerOptions(tlsCfg)...),
		ExtraUnary:    []grpc.UnaryServerInterceptor{auth.UnaryInterceptor(authn, api.AccessPolicy())},
		ExtraStream:   []grpc.StreamServerInterceptor{auth.StreamInterceptor(authn, api.AccessPolicy())},
	})
	pulsev1.RegisterControlServiceServer(grpcSrv.GRPC(), svc)
	pulsev1.RegisterDispatchControlServiceServer(grpcSrv.GRPC(), dispatchSvc)
	pulsev1.RegisterScheduleServiceServer(grpcSrv.GRPC(), scheduleSvc)

	return &App{
		cfg: cfg, logger: logger,
		pool: pool, store: store, coalescer: coalescer, grpc: grpcSrv, admin: admin,
		expiry:   pauseexpiry.New(store, m, pauseexpiry.IntervalDefault, logger),
		depth:    queuedepth.New(store, m, cfg.DepthInterval, logger),
		serveErr: make(chan error, 1),
	}, nil
}

// AccessPolicy is who may call each route of the HTTP port: the JSON API's
// and the dashboard's, which share the mux and the authentication.
func AccessPolicy() auth.Policy {
	p := httpapi.AccessPolicy()
	maps.Copy(p, ui.AccessPolicy())
	return p
}

// Start binds both listeners, so a taken port fails start-up, and serves
// in the background.
func (a *App) Start() error {
	lis, err := net.Listen("tcp", a.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen grpc %s: %w", a.cfg.GRPCAddr, err)
	}
	if err := a.admin.Start(); err != nil {
		_ = lis.Close()
		return err
	}
	a.grpcLis = lis
	a.expiry.Start()
	a.depth.Start()
	a.served.Go(func() {
		if err := a.grpc.Serve(lis); err != nil {
			a.serveErr <- err
		}
	})
	return nil
}

// HTTPAddr is the bound HTTP address once started.
func (a *App) HTTPAddr() string { return a.admin.Addr() }

// GRPCAddr is the bound gRPC address once started.
func (a *App) GRPCAddr() string {
	if a.grpcLis == nil {
		return ""
	}
	return a.grpcLis.Addr().String()
}

// Stop shuts down in order: probes go NOT_SERVING; both transports stop
// taking requests and finish the ones in flight; the coalescer inserts (or
// answers with an error) every submit it accepted; the pool closes. A ctx
// that ends first cuts the transports' remaining requests short.
func (a *App) Stop(ctx context.Context) error {
	a.admin.SetNotServing()
	a.expiry.Stop()
	a.depth.Stop()

	var grpcErr, httpErr error
	var wg sync.WaitGroup
	if a.grpcLis != nil {
		wg.Go(func() { grpcErr = a.grpc.Stop(ctx) })
	}
	wg.Go(func() { httpErr = a.admin.Shutdown(ctx) })
	wg.Wait()
	a.served.Wait()

	var drainErr error
	if err := a.coalescer.Close(ctx); err != nil {
		drainErr = fmt.Errorf("drain submit coalescer: %w", err)
	}
	closeErr := a.store.Close() // the read side, after the handlers
	a.pool.Close()
	return errors.Join(grpcErr, httpErr, drainErr, closeErr)
}
