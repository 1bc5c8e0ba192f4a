package pgconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/server/backoff"
	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/migrate"
)

const (
	// EnvURL is the variable services read the database URL from; errors
	// about the URL name it.
	EnvURL = "PULSE_DATABASE_URL"
	// DefaultMaxConns is the pool size when Options.MaxConns is zero.
	DefaultMaxConns int32 = 10
	// RetryInitial is the first wait between connection attempts.
	RetryInitial = 200 * time.Millisecond
	// RetryMax caps the doubling wait between connection attempts (each
	// wait is shortened by up to a fifth at random).
	RetryMax = 5 * time.Second
)

// Options configures Open.
type Options struct {
	// URL is the connection string, usually PULSE_DATABASE_URL.
	URL string
	// Service becomes application_name unless the URL sets one.
	Service string
	// MinSchemaVersion is the oldest schema this service can run on.
	MinSchemaVersion int64
	// MaxConns caps the pool; zero means DefaultMaxConns.
	MaxConns int32
	// Logger receives a WARN line per failed connection attempt.
	Logger *slog.Logger
	// StatementTimeout, when positive, is every session's
	// statement_timeout (a startup parameter, so Postgres itself cancels a
	// statement that runs longer, whether or not the client still waits);
	// it overrides one the URL sets. Zero leaves the URL's or the server's.
	StatementTimeout time.Duration
}

// Open returns a pool once the database answers and its schema is at least
// MinSchemaVersion. While the database is unreachable it retries with
// backoff until ctx is done, so services started alongside Postgres wait for
// it instead of crash-looping. A schema that is too old fails at once with
// migrate.ErrSchemaTooOld: retrying cannot fix it.
func Open(ctx context.Context, opts Options) (*pgxpool.Pool, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		return nil, config.Invalid(EnvURL, "%s", redact(opts.URL, err.Error()))
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set && opts.Service != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = opts.Service
	}
	// Every pulse statement touches a handful of rows by index; a JIT
	// compile (~15 ms) costs more than any of them runs, and the planner
	// asks for one whenever stale queue statistics inflate an estimate past
	// jit_above_cost (jobstore/queue_head.go). A URL that sets jit wins.
	if _, set := cfg.ConnConfig.RuntimeParams["jit"]; !set {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	if err := pinReadCommitted(cfg.ConnConfig.RuntimeParams); err != nil {
		return nil, err
	}
	if opts.StatementTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(max(opts.StatementTimeout.Milliseconds(), 1), 10)
	}
	cfg.MaxConns = opts.MaxConns
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	// otelpgx v0.13 names spans after the statement's first word by default
	// (its WithTrimSQLInSpanName is deprecated as the default); arguments are
	// never recorded, so job payloads stay out of traces.
	cfg.ConnConfig.Tracer = otelpgx.NewTracer()

	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgconn: create pool: %s", redact(opts.URL, err.Error()))
	}
	if err := waitForDatabase(ctx, pool, logger); err != nil {
		pool.Close()
		return nil, err
	}
	if err := migrate.Require(ctx, pool, opts.MinSchemaVersion); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgconn: %w", err)
	}
	logger.Info("database ready",
		"host", cfg.ConnConfig.Host, "database", cfg.ConnConfig.Database, "max_conns", cfg.MaxConns)
	return pool, nil
}

// isolationParam is the session setting every pulse connection starts
// with at read committed (pinReadCommitted).
const isolationParam = "default_transaction_isolation"

// pinReadCommitted makes every session of the pool run its transactions
// at READ COMMITTED, whatever the database's or role's default. Pulse's
// statements are written for it: a claim's SKIP LOCKED and a report's
// guarded UPDATE re-check a row another transaction changed and go on,
// where REPEATABLE READ or SERIALIZABLE would fail the whole statement
// with a serialization error, under exactly the concurrency a queue runs
// at. Managed Postgres services and security baselines do set
// serializable as the default (ALTER DATABASE ... SET); a startup
// parameter outranks such a default. A URL that asks for another
// isolation itself is refused, naming the variable, rather than
// overridden behind its author's back.
func pinReadCommitted(params map[string]string) error {
	if v, set := params[isolationParam]; set && !strings.EqualFold(strings.TrimSpace(v), "read committed") {
		return config.Invalid(EnvURL, "%s=%s: pulse runs its statements at read committed (claims and reports re-check a row another transaction changed instead of failing); remove the setting from the URL", isolationParam, v)
	}
	params[isolationParam] = "read committed"
	return nil
}

// retry spaces the connection attempts of a service waiting for its
// database; the jitter keeps a fleet restarted with Postgres from knocking
// in step.
var retry = backoff.Policy{Initial: RetryInitial, Max: RetryMax, Jitter: 0.2}

// waitForDatabase pings until the database answers or ctx is done.
func waitForDatabase(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	b := backoff.New(retry)
	for attempt := 1; ; attempt++ {
		err := pool.Ping(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("pgconn: database unreachable, gave up after %d attempts: %w (last error: %w)", attempt, ctx.Err(), err)
		}
		delay := b.Next()
		logger.Warn("database unreachable, retrying",
			"attempt", attempt, "retry_in", delay, logging.Error, err)
		if backoff.Sleep(ctx, delay) != nil {
			return fmt.Errorf("pgconn: database unreachable, gave up after %d attempts: %w (last error: %w)", attempt, ctx.Err(), err)
		}
	}
}

// ReadinessCheck returns a check for adminhttp's /readyz: the database
// answers and its schema is still new enough (a rollback of migrations
// makes the service unready rather than wrong).
func ReadinessCheck(pool *pgxpool.Pool, minVersion int64) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("ping database: %w", err)
		}
		if err := migrate.Require(ctx, pool, minVersion); err != nil {
			if errors.Is(err, migrate.ErrSchemaTooOld) {
				return err
			}
			return fmt.Errorf("check schema version: %w", err)
		}
		return nil
	}
}

var (
	urlPassword = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://[^:/@]*:(.*)@`)
	// password=... in a keyword/value DSN or in a URL's query string.
	keywordPassword = regexp.MustCompile(`(?:^|[\s?&])password\s*=\s*('(?:[^'\\]|\\.)*'|[^&\s]+)`)
)

// redact removes the password in raw from msg. Parse errors from net/url
// quote the whole URL, so pgx's own redaction is not enough.
func redact(raw, msg string) string {
	var secrets []string
	if m := urlPassword.FindStringSubmatch(raw); m != nil && m[1] != "" {
		secrets = append(secrets, m[1])
		if dec, err := url.PathUnescape(m[1]); err == nil {
			secrets = append(secrets, dec)
		}
	}
	for _, m := range keywordPassword.FindAllStringSubmatch(raw, -1) {
		secrets = append(secrets, strings.Trim(m[1], "'"))
	}
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}
