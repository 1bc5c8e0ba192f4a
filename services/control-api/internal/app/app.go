package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"strings"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/buildinfo"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	serverconfig "github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/loop"
	"github.com/pulsequeue/pulse/pkg/server/pgconn"
	"github.com/pulsequeue/pulse/pkg/server/pglisten"
	"github.com/pulsequeue/pulse/pkg/server/service"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/config"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
	"github.com/pulsequeue/pulse/services/control-api/internal/mcpserver"
	"github.com/pulsequeue/pulse/services/control-api/internal/pauseexpiry"
	"github.com/pulsequeue/pulse/services/control-api/internal/queuedepth"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit"
	"github.com/pulsequeue/pulse/services/control-api/internal/ui"
	"github.com/pulsequeue/pulse/services/control-api/internal/waiter"
)

// Service is the name control-api reports in logs, metrics, traces and
// pg_stat_activity.
const Service = "control-api"

// MinSchemaVersion is the oldest schema control-api runs on: replace
// pending (a submit with a replace_key, every job read), job tags
// (written by submits, filtered by listings), job progress and metadata
// (which every job read returns), after job results (a job's
// result, and the settle_listeners row its waiters keep).
// Explaining a waiting job reads worker_presence; a submit writes
// jobs.timeout and the job's retry policy and claims unique keys in
// job_uniques; topics read and set topic_limits; the dashboard reads
// job_throughput; a job's view and its retry read and reset jobs.snoozes
// (VersionSnooze); submits write dependencies and queue reads walk
// jobs_claim_idx without blocked jobs (VersionJobDependencies); a submit
// writes jobs.rate_key and topics read and set rate limits
// (VersionRateLimits); the workflow view reads through the workflow
// indexes (VersionWorkflowView); topics read and set circuit breakers
// (VersionTopicBreakers); a submit writes jobs.concurrency_key and sequence_key, and topics read
// and set per-key limits (VersionConcurrencyKeys).
const MinSchemaVersion = migrations.VersionConcurrencyKeys

// Command is the control-api binary: serve (the default) and migrate.
func Command() service.Command[config.Config] {
	return service.Command[config.Config]{
		Name:        Service,
		Load:        config.Load,
		LogLevel:    func(c config.Config) string { return c.LogLevel },
		Usage:       usage,
		Serve:       Spec,
		ServeCheck:  func(c config.Config) error { _, err := c.Security(); return err },
		Subcommands: map[string]func(context.Context, config.Config, *slog.Logger) error{"migrate": Migrate},
	}
}

// App is a wired control-api: the service runtime's handle (Start, Stop,
// AdminAddr — the HTTP address — and GRPCAddr).
type App = service.Service

// New builds control-api on cfg (connecting to the database, refusing an
// old schema), ready to Start. Bad credentials or TLS files fail before
// the database is tried, as config.Load's validation does for the binary.
func New(ctx context.Context, cfg config.Config, logger *slog.Logger) (*App, error) {
	if _, err := cfg.Security(); err != nil {
		return nil, err
	}
	return service.New(ctx, Spec(cfg, logger))
}

// Spec is control-api as the runtime runs it: the ControlService,
// DispatchControlService, ScheduleService and TopicService on gRPC and on
// HTTP/JSON, the MCP server at /mcp, the dashboard, the submit coalescer, and the pause-expiry and
// queue-depth loops. Shutdown: probes flip; the loops stop; both transports stop
// taking requests and finish the ones in flight; then the coalescer
// inserts (or answers with an error) every submit it accepted.
func Spec(cfg config.Config, logger *slog.Logger) service.Spec {
	return service.Spec{
		Name: Service, Logger: logger,
		DatabaseURL: cfg.DatabaseURL, DBMaxConns: cfg.DBMaxConns, MinSchemaVersion: MinSchemaVersion,
		AdminAddr: cfg.HTTPAddr, AdminAddrVar: "PULSE_HTTP_ADDR", AdminAddrKey: "http_addr",
		GRPCAddr: cfg.GRPCAddr, ShutdownTimeout: cfg.ShutdownTimeout,
		MetricsMaxTopics: cfg.MetricsMaxTopics, MetricsTopicIdle: cfg.MetricsTopicIdle,
		Build: func(ctx context.Context, s *service.Service) error { return build(ctx, cfg, s) },
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
	if cfg.MetricsAuth && authn == nil {
		return serverconfig.Invalid("PULSE_METRICS_AUTH", "is true but authentication is off (PULSE_AUTH=none)")
	}
	store := jobstore.New(s.Pool(), jobstore.LogWakeErrors(logger))
	m := api.NewMetrics(s.Registry())
	authn.OnRefusal(m.AuthRefused)
	// The store's read side (bun over the pool) closes after the handlers.
	s.AddBackend("read_store", service.Funcs{StopFunc: func(context.Context) error { return store.Close() }})
	m.BoundTopics(s.Topics(), cfg.MetricsMaxTopics)

	// Reads and operator statements run on a pool of their own, each
	// statement under PULSE_READ_TIMEOUT in Postgres itself (ADR-0034): a
	// slow search holds a read connection for at most that long, and never
	// one of the connections submits insert on.
	readPool, err := pgconn.Open(ctx, pgconn.Options{
		URL: cfg.DatabaseURL, Service: Service + "-reads", MinSchemaVersion: MinSchemaVersion,
		MaxConns: cfg.DBReadMaxConns, Logger: logger, StatementTimeout: cfg.ReadTimeout,
	})
	if err != nil {
		return fmt.Errorf("open the read pool: %w", err)
	}
	s.AddBackend("read_pool", service.Funcs{StopFunc: func(context.Context) error { readPool.Close(); return nil }})
	reads := jobstore.New(readPool)
	s.AddBackend("read_pool_store", service.Funcs{StopFunc: func(context.Context) error { return reads.Close() }})

	coalescer := submit.NewCoalescer(store, submit.Options{
		MaxBatch: cfg.SubmitCoalesceMax,
		Flushers: cfg.SubmitFlushers,
		OnFlush:  func(rows int) { m.InsertRows.Observe(float64(rows)) },
		Logger:   logger,
	})
	// Handlers submit through it until both listeners have closed.
	s.AddBackend("submit_coalescer", service.Funcs{StopFunc: func(ctx context.Context) error {
		if err := coalescer.Close(ctx); err != nil {
			return fmt.Errorf("close submit coalescer: %w", err)
		}
		return nil
	}})
	// Waiters for finished jobs (WaitJob, GET /v1/jobs/{id}?wait=): woken
	// by pulse_jobs_settled on the process's LISTEN connection; the hub
	// stops (waking every waiter) before the listeners close.
	waiters := waiter.New(store, waiter.Options{Logger: logger})
	s.Listener().Handle(jobstore.SettledChannel, pglisten.Handler{Notify: waiters.Notify, Resync: waiters.Resync})
	s.Add("waiters", waiters)
	m.WatchWaiters(waiters.Waiters)
	svc := api.NewControlService(splitStore{Store: reads, writes: store}, coalescer, api.Options{
		Limits:       jobspec.Limits{MaxArgsBytes: cfg.MaxArgsBytes},
		MaxBatchJobs: cfg.MaxBatchJobs,
		Metrics:      m,
		Waiters:      waiters,
		Logger:       logger,
	})

	jsonAPI := httpapi.New(svc, httpapi.Options{
		MaxArgsBytes: cfg.MaxArgsBytes,
		Logger:       logger,
	})
	dispatchSvc := api.NewDispatchControl(reads, api.DispatchOptions{Metrics: m, Logger: logger})
	scheduleSvc := api.NewSchedules(reads, nil, logger)
	bulkSvc := api.NewBulkJobs(reads, api.BulkOptions{Logger: logger})
	topicSvc := api.NewTopicService(reads, logger)
	dashboard := ui.New(svc, dispatchSvc, scheduleSvc, ui.Options{
		TraceURL: cfg.UITraceURL, Refresh: cfg.UIRefresh, Logger: logger,
		Throughput: api.NewThroughput(reads),
		Topics:     topicSvc,
		Bulk:       bulkSvc,
		Workflows:  svc,
	})

	admin := s.Admin()
	// The dashboard answers its own refusals with a page; the API with JSON.
	policy := AccessPolicy()
	if cfg.MetricsAuth {
		policy["GET /metrics"] = auth.MetricsRoles
	}
	admin.Use(auth.Middleware(authn, auth.HTTPPolicy(policy), dashboard.WriteAuthError))
	// Outermost: a browser's state-changing request from another origin is
	// refused before anything else runs, on every route (the JSON API's as
	// well as the dashboard's), so a foreign page cannot act with an
	// operator's Basic credentials.
	admin.Use(auth.CrossOrigin(dashboard.WriteAuthError))
	admin.SetTLS(sec.HTTPTLS())
	routes := &policedMux{mux: admin, policy: policy}
	jsonAPI.Register(routes)
	jsonAPI.RegisterDispatch(routes, dispatchSvc)
	jsonAPI.RegisterSchedules(routes, scheduleSvc)
	jsonAPI.RegisterBulk(routes, bulkSvc)
	jsonAPI.RegisterTopics(routes, topicSvc)
	jsonAPI.RegisterWorkflows(routes, svc)
	dashboard.Register(routes)
	if len(routes.unlisted) > 0 {
		return fmt.Errorf("routes without an entry of their own in the access policy (they would answer with the /v1/ fallback's roles): %s", strings.Join(routes.unlisted, ", "))
	}
	// MCP: the same services as the JSON API, and for agent workers the
	// gateway's claim, heartbeat and report statements (on the main pool:
	// the claim sets its own statement timeout).
	// Their reports count in job_throughput under this process's own
	// writer, as each gateway's do under its id, so replicas never wait on
	// each other's rows.
	host, _ := os.Hostname()
	writer := fmt.Sprintf("%s-%s-%d", Service, host, os.Getpid())
	if jobstore.ValidWriter(writer) != nil {
		writer = Service // a host name job_throughput cannot take
	}
	queue := jobstore.New(s.Pool(), jobstore.ThroughputWriter(writer))
	s.AddBackend("mcp_queue_store", service.Funcs{StopFunc: func(context.Context) error { return queue.Close() }})
	agents := mcpserver.New(mcpserver.Deps{Jobs: svc, Dispatch: dispatchSvc, Topics: topicSvc, Queue: queue},
		mcpserver.Options{Open: authn == nil, Version: buildinfo.Version(), Logger: logger, OnCall: m.MCPCalled})
	admin.Handle(mcpserver.Path, agents.Handler())

	grpcSrv := s.GRPC(grpcserver.Options{
		// A batch may be as large over gRPC as over HTTP.
		ServerOptions:     auth.GRPCServerOptions(tlsCfg),
		Admit:             auth.TapHandle(authn, api.AccessPolicy()),
		DisableReflection: !cfg.GRPCReflection,
		// Only a batch may be as large over gRPC as over HTTP, and only
		// within the in-flight budget; every other message is bounded like
		// a single-job or schedule body (ADR-0029).
		MaxRecvMsgSize: int(jsonAPI.BatchBodyLimit()),
		LargeMethods:   []string{pulsev1.ControlService_SubmitJobs_FullMethodName},
		SmallMsgSize:   int(httpapi.SingleLimit(max(cfg.MaxArgsBytes, pulsetype.DefaultMaxArgsBytes))),
		InflightBytes:  cfg.GRPCInflightBytes,
	})
	pulsev1.RegisterControlServiceServer(grpcSrv.GRPC(), svc)
	pulsev1.RegisterDispatchControlServiceServer(grpcSrv.GRPC(), dispatchSvc)
	pulsev1.RegisterScheduleServiceServer(grpcSrv.GRPC(), scheduleSvc)
	pulsev1.RegisterTopicServiceServer(grpcSrv.GRPC(), topicSvc)

	expiry := pauseexpiry.New(store, m, logger)
	s.Every(loop.Config{Name: "pause_expiry", Interval: pauseexpiry.IntervalDefault}, expiry.Sweep)
	depth := queuedepth.New(store, m)
	s.Every(loop.Config{Name: "queue_depth", Interval: cfg.DepthInterval, Immediate: true}, depth.Refresh)
	return nil
}

// splitStore is the ControlService's store: submits (Insert) on the main
// pool, with no statement timeout, and everything else — lookups,
// listings, searches, cancel, retry — on the read pool's store, under
// PULSE_READ_TIMEOUT.
type splitStore struct {
	*jobstore.Store
	writes *jobstore.Store
}

func (s splitStore) Insert(ctx context.Context, jobs []pulsetype.NewJob) ([]pulsetype.Inserted, error) {
	return s.writes.Insert(ctx, jobs)
}

// policedMux mounts routes on mux and keeps the patterns that policy does
// not name exactly: auth.HTTPPolicy matches a request against the
// policy's own patterns, so a route missing from it would fall under the
// closest one — the /v1/ fallback, which admits producers — instead of
// being refused. build refuses to start with any.
type policedMux struct {
	mux      httpapi.Mux
	policy   auth.Policy
	unlisted []string
}

func (m *policedMux) Handle(pattern string, h http.Handler) {
	if _, ok := m.policy[pattern]; !ok {
		m.unlisted = append(m.unlisted, pattern)
	}
	m.mux.Handle(pattern, h)
}

// AccessPolicy is who may call each route of the HTTP port: the JSON API's
// and the dashboard's, which share the mux and the authentication.
func AccessPolicy() auth.Policy {
	p := httpapi.AccessPolicy()
	maps.Copy(p, ui.AccessPolicy())
	return p
}

func usage(w io.Writer) error {
	fmt.Fprint(w, `Usage: control-api [subcommand]

Subcommands:
  serve      serve the ControlService over gRPC and HTTP/JSON (the default)
  migrate    apply every pending schema migration, then exit
  version    print the version (also --version)
  help       print this help

Environment (name, default, meaning):
`)
	if err := config.WriteUsage(w); err != nil {
		return err
	}
	fmt.Fprint(w, "\nTracing is configured by the standard OTEL_* variables (OTLP).\n")
	return nil
}
