// Package config is control-api's one typed configuration, read from PULSE_*
// environment variables once in main.
package config

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	serverconfig "github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/migrate"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

// Defaults, named so code, docs and --help agree on one value.
const (
	HTTPAddrDefault          = ":8080"
	GRPCAddrDefault          = ":50051"
	LogLevelDefault          = "info"
	DBMaxConnsDefault        = 20
	MaxArgsBytesDefault      = pulsetype.DefaultMaxArgsBytes
	MaxBatchJobsDefault      = 1000
	SubmitCoalesceMaxDefault = 1000
	SubmitFlushersDefault    = 4
	ShutdownTimeoutDefault   = 20 * time.Second
	DepthIntervalDefault     = 5 * time.Second
	UIRefreshDefault         = 2 * time.Second
	// GRPCInflightBytesDefault is eight batches of the default bound.
	GRPCInflightBytesDefault = 512 << 20
	// UIRefreshMin keeps a forgotten dashboard tab from becoming load.
	UIRefreshMin = 250 * time.Millisecond
	// MigrateLockTimeoutDefault is the lock_timeout of every statement
	// `control-api migrate` runs (migrate.DefaultLockTimeout).
	MigrateLockTimeoutDefault = migrate.DefaultLockTimeout
	// MigrateLockRetriesDefault is how often `control-api migrate` retries
	// a migration that gave up on its lock_timeout (migrate.DefaultLockRetries).
	MigrateLockRetriesDefault = migrate.DefaultLockRetries
	// MigrateLockTimeoutMax keeps a typo ("5m" for "5s") from letting a
	// migration queue the workload behind it for long.
	MigrateLockTimeoutMax = time.Minute
	// MigrateLockRetriesMax bounds the retries.
	MigrateLockRetriesMax = 1000
	// ReadTimeoutDefault is the statement_timeout of every read and
	// operator statement; ReadTimeoutMax keeps a typo from removing it.
	ReadTimeoutDefault = 5 * time.Second
	ReadTimeoutMax     = 10 * time.Minute
	// DBReadMaxConnsDefault is the read pool's size, beside
	// PULSE_DB_MAX_CONNS.
	DBReadMaxConnsDefault = 5
	// MetricsMaxTopicsDefault and MetricsTopicIdleDefault bound the topic
	// label of every metric (pkg/server/metrics).
	MetricsMaxTopicsDefault = metrics.MaxTopicsDefault
	MetricsTopicIdleDefault = metrics.TopicIdleDefault
)

// Config is everything control-api reads from its environment.
type Config struct {
	DatabaseURL        string        `envconfig:"DATABASE_URL" required:"true" desc:"Postgres connection URL (required)"`
	HTTPAddr           string        `envconfig:"HTTP_ADDR" desc:"HTTP/JSON API, /metrics, /healthz and /readyz listen address"`
	GRPCAddr           string        `envconfig:"GRPC_ADDR" desc:"gRPC ControlService listen address"`
	GRPCReflection     bool          `envconfig:"GRPC_REFLECTION" desc:"serve gRPC server reflection (to operators only when authentication is on)"`
	GRPCInflightBytes  int64         `envconfig:"GRPC_INFLIGHT_BYTES" desc:"budget of SubmitJobs calls in flight: each holds the batch bound (64 MiB by default) until it ends; calls beyond it wait for it, before their message is read, as long as their deadline allows"`
	LogLevel           string        `envconfig:"LOG_LEVEL" desc:"debug, info, warn or error"`
	DBMaxConns         int32         `envconfig:"DB_MAX_CONNS" desc:"largest number of Postgres connections in the pool"`
	MaxArgsBytes       int           `envconfig:"MAX_ARGS_BYTES" desc:"largest args document one job may carry, in bytes"`
	MaxBatchJobs       int           `envconfig:"MAX_BATCH_JOBS" desc:"most jobs one SubmitJobs call or POST /v1/jobs:batch may carry"`
	SubmitCoalesceMax  int           `envconfig:"SUBMIT_COALESCE_MAX" desc:"most single submits coalesced into one INSERT"`
	SubmitFlushers     int           `envconfig:"SUBMIT_FLUSHERS" desc:"most coalesced INSERTs running at once"`
	ShutdownTimeout    time.Duration `envconfig:"SHUTDOWN_TIMEOUT" desc:"how long a graceful shutdown may take before connections are cut"`
	Auth               string        `envconfig:"AUTH" desc:"required: refuse to start without credentials; none: run open, every caller an operator (local development only)"`
	AuthUsers          string        `envconfig:"AUTH_USERS" desc:"Basic users, name:role:password-or-bcrypt-hash,...; roles are producer, worker, operator"`
	AuthTokens         string        `envconfig:"AUTH_TOKENS" desc:"bearer tokens, name:role:token,..."`
	AuthCerts          string        `envconfig:"AUTH_CERTS" desc:"client certificate identities, common-name:role,...; needs PULSE_TLS_CLIENT_CA"`
	TLSCert            string        `envconfig:"TLS_CERT" desc:"PEM certificate for gRPC and HTTP; set with PULSE_TLS_KEY, or neither for plaintext"`
	TLSKey             string        `envconfig:"TLS_KEY" desc:"PEM private key for PULSE_TLS_CERT"`
	TLSClientCA        string        `envconfig:"TLS_CLIENT_CA" desc:"PEM CA bundle client certificates must chain to: required on gRPC, verified when presented on HTTP"`
	AllowPlaintext     bool          `envconfig:"ALLOW_PLAINTEXT_CREDENTIALS" desc:"true lets users and tokens cross a non-loopback listener without TLS (trusted private networks only)"`
	DepthInterval      time.Duration `envconfig:"QUEUE_DEPTH_INTERVAL" desc:"how often pulse_queue_depth is recounted (one grouped query over the live-job indexes)"`
	UITraceURL         string        `envconfig:"UI_TRACE_URL" desc:"trace viewer link for a job's trace on the dashboard, with {trace_id} where the id goes (Jaeger: http://localhost:16686/trace/{trace_id}); empty shows the id unlinked"`
	UIRefresh          time.Duration `envconfig:"UI_REFRESH" desc:"how often open dashboard pages refresh the banner and drain panel"`
	MigrateLockTimeout time.Duration `envconfig:"MIGRATE_LOCK_TIMEOUT" desc:"migrate: lock_timeout of every migration statement; a migration waiting longer for a lock gives up (and is retried) instead of queueing the workload behind it"`
	MigrateLockRetries int           `envconfig:"MIGRATE_LOCK_RETRIES" desc:"migrate: how many times a migration that gave up on PULSE_MIGRATE_LOCK_TIMEOUT is retried, with a doubling wait from 1s up to 30s"`
	ReadTimeout        time.Duration `envconfig:"READ_TIMEOUT" desc:"statement_timeout of every read and operator statement (job lookups and listings, searches, the dashboard, cancel, retry, bulk actions, pause, schedules, topics): Postgres cancels one that runs longer, and the call answers 503 / Unavailable naming it"`
	DBReadMaxConns     int32         `envconfig:"DB_READ_MAX_CONNS" desc:"size of the read pool those statements run on, beside PULSE_DB_MAX_CONNS (submits): slow reads never take a submit's connection"`
	MetricsMaxTopics   int           `envconfig:"METRICS_MAX_TOPICS" desc:"most topic label values one metric carries, _other included; topics beyond it are counted under topic=\"_other\""`
	MetricsTopicIdle   time.Duration `envconfig:"METRICS_TOPIC_IDLE" desc:"a topic no metric has counted for this long loses its series and its place under PULSE_METRICS_MAX_TOPICS"`
	MetricsAuth        bool          `envconfig:"METRICS_AUTH" desc:"true: /metrics needs credentials of any role (not with PULSE_AUTH=none); false: /metrics is public"`
}

// Default returns a Config holding every default, the starting point Load
// overwrites with whatever the environment sets.
func Default() Config {
	return Config{
		HTTPAddr:           HTTPAddrDefault,
		Auth:               string(auth.ModeDefault),
		GRPCAddr:           GRPCAddrDefault,
		GRPCReflection:     true,
		GRPCInflightBytes:  GRPCInflightBytesDefault,
		LogLevel:           LogLevelDefault,
		DBMaxConns:         DBMaxConnsDefault,
		MaxArgsBytes:       MaxArgsBytesDefault,
		MaxBatchJobs:       MaxBatchJobsDefault,
		SubmitCoalesceMax:  SubmitCoalesceMaxDefault,
		SubmitFlushers:     SubmitFlushersDefault,
		ShutdownTimeout:    ShutdownTimeoutDefault,
		DepthInterval:      DepthIntervalDefault,
		UIRefresh:          UIRefreshDefault,
		MigrateLockTimeout: MigrateLockTimeoutDefault,
		MigrateLockRetries: MigrateLockRetriesDefault,
		ReadTimeout:        ReadTimeoutDefault,
		DBReadMaxConns:     DBReadMaxConnsDefault,
		MetricsMaxTopics:   MetricsMaxTopicsDefault,
		MetricsTopicIdle:   MetricsTopicIdleDefault,
	}
}

// Load reads the environment over the defaults and validates the result.
func Load() (Config, error) {
	cfg := Default()
	if err := serverconfig.Load(&cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate names the variable holding the first bad value.
func (c *Config) Validate() error {
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
		// pgx's message may quote the URL; keep the password out of logs.
		return serverconfig.Invalid("PULSE_DATABASE_URL", "is not a valid Postgres connection string")
	}
	if err := validateAddr(c.HTTPAddr); err != nil {
		return serverconfig.Invalid("PULSE_HTTP_ADDR", "%v", err)
	}
	if err := validateAddr(c.GRPCAddr); err != nil {
		return serverconfig.Invalid("PULSE_GRPC_ADDR", "%v", err)
	}
	if batch := httpapi.BatchLimit(c.MaxArgsBytes); c.GRPCInflightBytes < batch {
		return serverconfig.Invalid("PULSE_GRPC_INFLIGHT_BYTES", "is %d; it must hold at least one batch, %d bytes", c.GRPCInflightBytes, batch)
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return serverconfig.Invalid("PULSE_LOG_LEVEL", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	if c.DBMaxConns < 1 {
		return serverconfig.Invalid("PULSE_DB_MAX_CONNS", "must be at least 1, got %d", c.DBMaxConns)
	}
	if c.MaxArgsBytes < 2 {
		return serverconfig.Invalid("PULSE_MAX_ARGS_BYTES", "must be at least 2 (the size of {}), got %d", c.MaxArgsBytes)
	}
	if c.MaxBatchJobs < 1 {
		return serverconfig.Invalid("PULSE_MAX_BATCH_JOBS", "must be at least 1, got %d", c.MaxBatchJobs)
	}
	if c.SubmitCoalesceMax < 1 {
		return serverconfig.Invalid("PULSE_SUBMIT_COALESCE_MAX", "must be at least 1, got %d", c.SubmitCoalesceMax)
	}
	if c.SubmitFlushers < 1 {
		return serverconfig.Invalid("PULSE_SUBMIT_FLUSHERS", "must be at least 1, got %d", c.SubmitFlushers)
	}
	if int32(c.SubmitFlushers) > c.DBMaxConns {
		return serverconfig.Invalid("PULSE_SUBMIT_FLUSHERS", "is %d, more than PULSE_DB_MAX_CONNS (%d): reads would starve", c.SubmitFlushers, c.DBMaxConns)
	}
	if c.ShutdownTimeout <= 0 {
		return serverconfig.Invalid("PULSE_SHUTDOWN_TIMEOUT", "must be positive, got %s", c.ShutdownTimeout)
	}
	if c.DepthInterval <= 0 {
		return serverconfig.Invalid("PULSE_QUEUE_DEPTH_INTERVAL", "must be positive, got %s", c.DepthInterval)
	}
	if err := validateTraceURL(c.UITraceURL); err != nil {
		return serverconfig.Invalid("PULSE_UI_TRACE_URL", "%v", err)
	}
	if c.UIRefresh < UIRefreshMin {
		return serverconfig.Invalid("PULSE_UI_REFRESH", "must be at least %s, got %s", UIRefreshMin, c.UIRefresh)
	}
	if c.MigrateLockTimeout <= 0 || c.MigrateLockTimeout > MigrateLockTimeoutMax {
		return serverconfig.Invalid("PULSE_MIGRATE_LOCK_TIMEOUT", "must be positive and at most %s, got %s", MigrateLockTimeoutMax, c.MigrateLockTimeout)
	}
	if c.MigrateLockRetries < 0 || c.MigrateLockRetries > MigrateLockRetriesMax {
		return serverconfig.Invalid("PULSE_MIGRATE_LOCK_RETRIES", "must be 0 to %d, got %d", MigrateLockRetriesMax, c.MigrateLockRetries)
	}
	if c.ReadTimeout < time.Millisecond || c.ReadTimeout > ReadTimeoutMax {
		return serverconfig.Invalid("PULSE_READ_TIMEOUT", "must be between 1ms and %s, got %s", ReadTimeoutMax, c.ReadTimeout)
	}
	if c.DBReadMaxConns < 1 {
		return serverconfig.Invalid("PULSE_DB_READ_MAX_CONNS", "must be at least 1, got %d", c.DBReadMaxConns)
	}
	if err := metrics.ValidateTopicBounds(c.MetricsMaxTopics, c.MetricsTopicIdle); err != nil {
		return err
	}
	// The security settings (Security) are checked when serving only:
	// migrate needs none of them.
	return nil
}

// validateTraceURL accepts empty, or an absolute http(s) URL template
// naming {trace_id}.
func validateTraceURL(s string) error {
	if s == "" {
		return nil
	}
	if !strings.Contains(s, "{trace_id}") {
		return fmt.Errorf("%q has no {trace_id} placeholder for the job's trace id", s)
	}
	u, err := url.Parse(strings.ReplaceAll(s, "{trace_id}", "0"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http or https URL", s)
	}
	return nil
}

// Security parses the credentials and loads the TLS files (auth.Settings):
// a nil Authenticator is open mode (PULSE_AUTH=none) and a nil tls.Config
// plaintext. Errors name the variable.
func (c *Config) Security() (auth.Security, error) {
	return auth.Settings{
		Mode: c.Auth, Users: c.AuthUsers, Tokens: c.AuthTokens, Certs: c.AuthCerts,
		TLSCert: c.TLSCert, TLSKey: c.TLSKey, TLSClientCA: c.TLSClientCA,
		AllowPlaintextCredentials: c.AllowPlaintext,
	}.Load(auth.Listener{Var: "PULSE_HTTP_ADDR", Addr: c.HTTPAddr}, auth.Listener{Var: "PULSE_GRPC_ADDR", Addr: c.GRPCAddr})
}

// validateAddr accepts host:port with a numeric port (0 picks a free one).
func validateAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q has port %q; want a number from 0 to 65535", addr, port)
	}
	return nil
}

// WriteUsage lists every variable with its default and meaning, in the
// order Config declares them.
func WriteUsage(w io.Writer) error {
	vars, err := serverconfig.Vars(Config{})
	if err != nil {
		return err
	}
	def := reflect.ValueOf(Default())
	t := def.Type()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, name := range vars {
		f := t.Field(i)
		d := fmt.Sprint(def.Field(i).Interface())
		if d == "" {
			d = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", name, d, f.Tag.Get("desc"))
	}
	return tw.Flush()
}
