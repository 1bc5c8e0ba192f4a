package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsequeue/pulse/pkg/buildinfo"
	"github.com/pulsequeue/pulse/pkg/server/adminhttp"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/internal/background"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/loop"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/pgconn"
	"github.com/pulsequeue/pulse/pkg/server/pglisten"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"
)

// Component is one part of a service the runtime starts and stops. Start
// gets the start-up context (it ends when a signal arrives during
// start-up) and must not tie background work to it; Stop gets the shutdown
// context, bounded by what is left of Spec.ShutdownTimeout.
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Funcs is a Component from two functions; either may be nil.
type Funcs struct {
	StartFunc func(ctx context.Context) error
	StopFunc  func(ctx context.Context) error
}

// Start calls StartFunc.
func (f Funcs) Start(ctx context.Context) error {
	if f.StartFunc == nil {
		return nil
	}
	return f.StartFunc(ctx)
}

// Stop calls StopFunc.
func (f Funcs) Stop(ctx context.Context) error {
	if f.StopFunc == nil {
		return nil
	}
	return f.StopFunc(ctx)
}

// Closer is a Component that only closes something when stopped (a
// store's read side, after the handlers using it are done).
func Closer(closeFn func() error) Component {
	return Funcs{StopFunc: func(context.Context) error { return closeFn() }}
}

// Go is a Component running fn in its own goroutine from Start until Stop
// ends fn's context and fn returns.
func Go(fn func(ctx context.Context)) Component { return &goComponent{fn: fn} }

type goComponent struct {
	fn func(ctx context.Context)
	bg background.Runner
}

func (g *goComponent) Start(ctx context.Context) error { g.bg.Start(ctx, g.fn); return nil }
func (g *goComponent) Stop(ctx context.Context) error  { return g.bg.Stop(ctx) }

// Spec is one service: what the runtime needs to run it, and Build, which
// wires the service's own parts.
type Spec struct {
	// Name is the service's name in logs, metrics, traces and
	// application_name.
	Name string
	// Logger is the service's logger (Main builds it from the
	// configuration).
	Logger *slog.Logger
	// DatabaseURL and DBMaxConns open the pool.
	DatabaseURL string
	DBMaxConns  int32
	// MinSchemaVersion is the oldest schema the service runs on: older
	// refuses to start, and /readyz fails should the schema be rolled back.
	MinSchemaVersion int64
	// AdminAddr is the admin HTTP server's address; AdminAddrVar the
	// variable it came from, for errors (default PULSE_ADMIN_ADDR);
	// AdminAddrKey its key on the start line (default admin_addr).
	AdminAddr    string
	AdminAddrVar string
	AdminAddrKey string
	// GRPCAddr, when set, serves the gRPC server Build configured with
	// (*Service).GRPC; GRPCAddrVar names its variable (default
	// PULSE_GRPC_ADDR).
	GRPCAddr    string
	GRPCAddrVar string
	// ShutdownTimeout bounds the whole shutdown (PULSE_SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// StartAttrs are added to the start line (intervals, ids).
	StartAttrs []any
	// MetricsMaxTopics and MetricsTopicIdle bound the topic label of the
	// service's metrics (PULSE_METRICS_MAX_TOPICS, PULSE_METRICS_TOPIC_IDLE;
	// see Topics). Zero: metrics.MaxTopicsDefault, metrics.TopicIdleDefault.
	MetricsMaxTopics int
	MetricsTopicIdle time.Duration
	// Build builds the service's parts on s and registers them. It runs
	// once, after the pool, the registry and the admin server exist.
	Build func(ctx context.Context, s *Service) error
}

// part is a registered Component with its name, for logs.
type part struct {
	name string
	c    Component
}

// Service is a service being run: what Build wires on, and the handle a
// test starts and stops.
type Service struct {
	spec   Spec
	logger *slog.Logger

	pool     *pgxpool.Pool
	reg      *prometheus.Registry
	admin    *adminhttp.Server
	grpc     *grpcserver.Server
	listener *pglisten.Listener
	loops    *loop.Metrics
	topics   *metrics.Topics

	backends []part
	workers  []part

	startedBackends int
	startedWorkers  int
	adminStarted    bool
	grpcLis         net.Listener
	serveErr        chan error
	served          sync.WaitGroup
	stopOnce        sync.Once
	stopErr         error
}

// Run runs the service until ctx ends (SIGTERM in Main), then shuts it
// down: tracing, New, Start, wait, Stop, flush. This is what Main runs for
// the serve command.
func Run(ctx context.Context, spec Spec) error {
	spec = spec.withDefaults()
	shutdownTracing, err := telemetry.SetupTracing(ctx, spec.Name, buildinfo.Version())
	if err != nil {
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), spec.ShutdownTimeout)
		defer cancel()
		if err := shutdownTracing(fctx); err != nil {
			spec.Logger.Warn("flush traces", logging.Error, err)
		}
	}()
	s, err := New(ctx, spec)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

func (spec Spec) withDefaults() Spec {
	if spec.Logger == nil {
		spec.Logger = slog.New(slog.DiscardHandler)
	}
	if spec.AdminAddrVar == "" {
		spec.AdminAddrVar = "PULSE_ADMIN_ADDR"
	}
	if spec.AdminAddrKey == "" {
		spec.AdminAddrKey = "admin_addr"
	}
	if spec.GRPCAddrVar == "" {
		spec.GRPCAddrVar = "PULSE_GRPC_ADDR"
	}
	if spec.ShutdownTimeout <= 0 {
		spec.ShutdownTimeout = 20 * time.Second
	}
	if spec.MetricsMaxTopics <= 0 {
		spec.MetricsMaxTopics = metrics.MaxTopicsDefault
	}
	if spec.MetricsTopicIdle <= 0 {
		spec.MetricsTopicIdle = metrics.TopicIdleDefault
	}
	return spec
}

// New opens the pool (waiting for the database, refusing an old schema),
// builds the registry and the admin server, and runs spec.Build. Nothing
// listens yet.
func New(ctx context.Context, spec Spec) (*Service, error) {
	spec = spec.withDefaults()
	s := &Service{spec: spec, logger: spec.Logger, serveErr: make(chan error, 1)}
	pool, err := pgconn.Open(ctx, pgconn.Options{
		URL: spec.DatabaseURL, Service: spec.Name, MinSchemaVersion: spec.MinSchemaVersion,
		MaxConns: spec.DBMaxConns, Logger: spec.Logger,
	})
	if err != nil {
		return nil, err
	}
	s.pool = pool
	s.reg = metrics.NewRegistry(spec.Name)
	pgconn.RegisterPoolMetrics(s.reg, pool)
	s.admin = adminhttp.New(spec.AdminAddr, s.reg, spec.Logger)
	s.admin.AddReadinessCheck("database", pgconn.ReadinessCheck(pool, spec.MinSchemaVersion))
	if spec.Build != nil {
		if err := spec.Build(ctx, s); err != nil {
			pool.Close()
			return nil, err
		}
	}
	if spec.GRPCAddr != "" && s.grpc == nil {
		pool.Close()
		return nil, fmt.Errorf("service %s: GRPCAddr set but Build configured no gRPC server", spec.Name)
	}
	if s.listener != nil {
		// Last, so it starts once every subscriber runs and stops first.
		s.workers = append(s.workers, part{"listener", s.listener})
	}
	return s, nil
}

// Logger is the service's logger.
func (s *Service) Logger() *slog.Logger { return s.logger }

// Pool is the service's pool.
func (s *Service) Pool() *pgxpool.Pool { return s.pool }

// Registry is the service's metrics registry, exported on /metrics.
func (s *Service) Registry() *prometheus.Registry { return s.reg }

// Topics bounds the topic label of the service's metrics (Spec's
// MetricsMaxTopics, MetricsTopicIdle): every metric with a topic label
// takes its value from Topics().Label and is added with Bound. Its first
// call adds the loop metrics_topics, which forgets idle topics every
// metrics.TopicSweepInterval.
func (s *Service) Topics() *metrics.Topics {
	if s.topics == nil {
		s.topics = metrics.NewTopics(s.spec.MetricsMaxTopics, s.spec.MetricsTopicIdle)
		s.Every(loop.Config{Name: "metrics_topics", Interval: metrics.TopicSweepInterval},
			func(context.Context) error { s.topics.Sweep(); return nil })
	}
	return s.topics
}

// Admin is the admin HTTP server, for routes, middleware, TLS and
// readiness checks; it starts listening in Start.
func (s *Service) Admin() *adminhttp.Server { return s.admin }

// GRPC creates the gRPC server with opts (Logger and Metrics are filled
// in) on its first call and returns it; register services on its GRPC().
// It serves on Spec.GRPCAddr.
func (s *Service) GRPC(opts grpcserver.Options) *grpcserver.Server {
	if s.grpc == nil {
		if opts.Logger == nil {
			opts.Logger = s.logger
		}
		if opts.Metrics == nil {
			opts.Metrics = metrics.GRPCServerMetrics(s.reg)
		}
		s.grpc = grpcserver.New(opts)
	}
	return s.grpc
}

// Listener is the process's one LISTEN connection; subscribe with Handle
// during Build. It starts after every worker and stops before them.
func (s *Service) Listener() *pglisten.Listener {
	if s.listener == nil {
		s.listener = pglisten.New(pglisten.FromPool(s.pool), s.logger)
	}
	return s.listener
}

// Add registers a worker: a part that takes work on its own (a loop, the
// dispatcher) or holds requests open (the gateway's streams). Workers
// start in the order added, after the backends, and stop in reverse order
// once readiness has flipped, before the listeners close.
func (s *Service) Add(name string, c Component) {
	s.workers = append(s.workers, part{name, c})
}

// AddBackend registers a part request handlers rely on (the submit
// coalescer, worker presence): started before any worker, stopped after
// the listeners have closed, in reverse order.
func (s *Service) AddBackend(name string, c Component) {
	s.backends = append(s.backends, part{name, c})
}

// Every registers a periodic loop running fn as a worker: cfg's Logger
// and Metrics (pulse_loop_errors_total) are the service's, its Jitter
// loop.DefaultJitter unless set.
func (s *Service) Every(cfg loop.Config, fn func(ctx context.Context) error) *loop.Loop {
	if s.loops == nil {
		s.loops = loop.NewMetrics(s.reg)
	}
	if cfg.Logger == nil {
		cfg.Logger = s.logger
	}
	if cfg.Metrics == nil {
		cfg.Metrics = s.loops
	}
	if cfg.Jitter == 0 {
		cfg.Jitter = loop.DefaultJitter
	}
	l := loop.New(cfg, fn)
	s.Add(cfg.Name, l)
	return l
}

// AdminAddr is the admin server's bound address once started.
func (s *Service) AdminAddr() string { return s.admin.Addr() }

// GRPCAddr is the gRPC server's bound address once started, or "".
func (s *Service) GRPCAddr() string {
	if s.grpcLis == nil {
		return ""
	}
	return s.grpcLis.Addr().String()
}

// Start binds the admin listener, starts the backends and the workers in
// order, then binds and serves gRPC. On a failure it stops what started
// (within Spec.ShutdownTimeout) and returns the error.
func (s *Service) Start(ctx context.Context) error {
	if err := s.start(ctx); err != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.spec.ShutdownTimeout)
		defer cancel()
		if stopErr := s.Stop(sctx); stopErr != nil {
			s.logger.Warn("stop after a failed start", logging.Error, stopErr)
		}
		return err
	}
	attrs := []any{"version", buildinfo.Version(), s.spec.AdminAddrKey, s.AdminAddr()}
	msg := s.spec.Name + " running"
	if s.grpcLis != nil {
		attrs = append(attrs, "grpc_addr", s.GRPCAddr())
		msg = s.spec.Name + " serving"
	}
	s.logger.Info(msg, append(attrs, s.spec.StartAttrs...)...)
	return nil
}

func (s *Service) start(ctx context.Context) error {
	if err := s.admin.Start(); err != nil {
		return fmt.Errorf("%w (%s)", err, s.spec.AdminAddrVar)
	}
	s.adminStarted = true
	for _, p := range s.backends {
		if err := p.c.Start(ctx); err != nil {
			return err
		}
		s.startedBackends++
	}
	for _, p := range s.workers {
		if err := p.c.Start(ctx); err != nil {
			return err
		}
		s.startedWorkers++
	}
	if s.grpc == nil || s.spec.GRPCAddr == "" {
		return nil
	}
	lis, err := net.Listen("tcp", s.spec.GRPCAddr)
	if err != nil {
		return fmt.Errorf("grpc: listen %s (%s): %w", s.spec.GRPCAddr, s.spec.GRPCAddrVar, err)
	}
	s.grpcLis = lis
	s.served.Go(func() {
		if err := s.grpc.Serve(lis); err != nil {
			s.serveErr <- err
		}
	})
	return nil
}

// Run serves until ctx ends or the gRPC server fails, then stops within
// Spec.ShutdownTimeout. Start must not have been called.
func (s *Service) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-s.serveErr:
		s.logger.Error("grpc server failed; shutting down", logging.Error, serveErr)
	}
	s.logger.Info("shutting down", "timeout", s.spec.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.spec.ShutdownTimeout)
	defer cancel()
	if err := errors.Join(serveErr, s.Stop(sctx)); err != nil {
		s.logger.Error("stopped with errors", logging.Error, err)
		return err
	}
	s.logger.Info("stopped cleanly")
	return nil
}

// Stop shuts down in order: readiness flips (HTTP 503, gRPC NOT_SERVING)
// while the listeners still answer; workers stop, last added first; the
// listeners stop, finishing in-flight requests until ctx ends; backends
// stop; the pool closes. Only what started is stopped; a second call
// returns the first's result.
func (s *Service) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Service) stop(ctx context.Context) error {
	var errs []error
	s.admin.SetNotServing()
	if s.grpc != nil {
		s.grpc.SetNotServing()
	}
	for i := s.startedWorkers - 1; i >= 0; i-- {
		errs = append(errs, s.stopPart(ctx, s.workers[i]))
	}

	var grpcErr, httpErr error
	var wg sync.WaitGroup
	if s.grpcLis != nil {
		wg.Go(func() { grpcErr = s.grpc.Stop(ctx) })
	}
	if s.adminStarted {
		wg.Go(func() { httpErr = s.admin.Shutdown(ctx) })
	}
	wg.Wait()
	s.served.Wait()
	errs = append(errs, grpcErr, httpErr)

	for i := s.startedBackends - 1; i >= 0; i-- {
		errs = append(errs, s.stopPart(ctx, s.backends[i]))
	}
	s.pool.Close()
	return errors.Join(errs...)
}

// stopGrace is how long a part asked to stop with an ended context has to
// return: it should at once, cutting short what it was finishing.
const stopGrace = time.Second

// stopPart stops one part, giving up on it (and saying so) when it has not
// returned stopGrace after ctx ended: the shutdown goes on with the next
// step.
func (s *Service) stopPart(ctx context.Context, p part) error {
	done := make(chan error, 1)
	go func() { done <- p.c.Stop(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		grace := time.NewTimer(stopGrace)
		defer grace.Stop()
		select {
		case err = <-done:
		case <-grace.C:
			s.logger.Warn("did not stop within PULSE_SHUTDOWN_TIMEOUT; going on", "part", p.name)
			err = ctx.Err()
		}
	}
	if err != nil {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	return nil
}
