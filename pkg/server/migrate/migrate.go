// Package migrate applies the embedded schema migrations with goose and
// answers which schema version a database is at.
//
// Migrations run against a live, busy database, so Up guards them three
// ways (migrations/README.md has the rules a migration itself follows):
//
//   - one run at a time: goose's Postgres session locker holds an advisory
//     lock for the whole run, so a second `migrate` (a retried Kubernetes
//     Job and a manual run) waits for the first and then finds nothing to
//     apply, instead of interleaving with it;
//   - every statement runs with lock_timeout (Options.LockTimeout): a
//     migration that needs a lock the workload holds gives up after that
//     long instead of queueing every claim, report and submit behind its
//     own waiting ACCESS EXCLUSIVE request;
//   - a migration that gave up on lock_timeout is retried, up to
//     Options.LockRetries times with a doubling wait, each retry logged.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/pulsequeue/pulse/migrations"
)

// Defaults, named so code, docs and --help agree on one value.
const (
	// DefaultLockTimeout is every migration statement's lock_timeout. A
	// statement waiting for a lock on jobs holds every claim, report and
	// submit that arrives meanwhile in the lock queue behind it, and a
	// claim's statements give up after 1s (jobstore.ClaimStatementTimeout):
	// so a migration gives up first, and is retried.
	DefaultLockTimeout = 500 * time.Millisecond
	// DefaultLockRetries is how many times a migration that gave up on
	// lock_timeout is tried again.
	DefaultLockRetries = 10
	// DefaultRetryBackoff is the wait before the first retry; each later
	// wait doubles, up to MaxRetryBackoff.
	DefaultRetryBackoff = time.Second
	// MaxRetryBackoff caps the wait between two retries.
	MaxRetryBackoff = 30 * time.Second
	// RunLockWait is how long a run waits for another run's session lock
	// (polled every RunLockPoll) before it gives up.
	RunLockWait = 30 * time.Minute
	// RunLockPoll is how often a waiting run tries the session lock.
	RunLockPoll = time.Second
)

// sqlstateLockNotAvailable is what a statement that waited lock_timeout
// fails with.
const sqlstateLockNotAvailable = "55P03"

// Options tune Up. Start from DefaultOptions.
type Options struct {
	// LockTimeout is the lock_timeout of the session every migration runs
	// in; it must be positive.
	LockTimeout time.Duration
	// LockRetries is how many times a migration that failed on
	// lock_timeout is retried; 0 fails at the first.
	LockRetries int
	// RetryBackoff is the wait before the first retry; it doubles for each
	// later one, up to MaxRetryBackoff.
	RetryBackoff time.Duration
	// Logger receives each applied migration and each retry; nil logs
	// nothing.
	Logger *slog.Logger
	// Migrations is the set to apply; nil applies migrations.FS.
	Migrations fs.FS
}

// DefaultOptions applies migrations.FS with the default lock timeout and
// retries, logging nothing.
func DefaultOptions() Options {
	return Options{
		LockTimeout:  DefaultLockTimeout,
		LockRetries:  DefaultLockRetries,
		RetryBackoff: DefaultRetryBackoff,
	}
}

// Up applies every pending migration to the database at url and returns the
// resulting version.
func Up(ctx context.Context, url string, opts Options) (int64, error) {
	if opts.LockTimeout <= 0 {
		return 0, fmt.Errorf("migrate: lock timeout must be positive, got %s", opts.LockTimeout)
	}
	if opts.LockRetries < 0 {
		return 0, fmt.Errorf("migrate: lock retries must not be negative, got %d", opts.LockRetries)
	}
	if opts.Migrations == nil {
		opts.Migrations = migrations.FS
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return 0, fmt.Errorf("migrate: parse database url: %w", err)
	}
	// Every connection goose opens (the one holding the session lock runs
	// the migrations) starts with this lock_timeout.
	cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(opts.LockTimeout.Milliseconds(), 10)
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockTimeout(uint64(RunLockPoll/time.Second), uint64(RunLockWait/RunLockPoll)))
	if err != nil {
		return 0, fmt.Errorf("migrate: session locker: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, opts.Migrations,
		goose.WithSessionLocker(locker))
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	backoff := opts.RetryBackoff
	for attempt := 0; ; attempt++ {
		results, err := provider.Up(ctx)
		var partial *goose.PartialError
		if errors.As(err, &partial) {
			results = partial.Applied
		}
		for _, r := range results {
			log.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
		}
		if err == nil {
			break
		}
		if !IsLockTimeout(err) || attempt >= opts.LockRetries {
			if IsLockTimeout(err) {
				return 0, fmt.Errorf("migrate: up: gave up after %d retries on lock_timeout %s: %w", attempt, opts.LockTimeout, err)
			}
			return 0, fmt.Errorf("migrate: up: %w", err)
		}
		var version int64
		var file string
		if partial != nil && partial.Failed != nil {
			version, file = partial.Failed.Source.Version, partial.Failed.Source.Path
		}
		log.Warn("migration gave up waiting for a lock; retrying",
			"version", version, "file", file, "lock_timeout", opts.LockTimeout,
			"retry", attempt+1, "of", opts.LockRetries, "wait", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("migrate: up: %w", ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, MaxRetryBackoff)
	}
	v, err := provider.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: read version: %w", err)
	}
	return v, nil
}

// IsLockTimeout reports whether err is a statement giving up on
// lock_timeout (SQLSTATE 55P03).
func IsLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateLockNotAvailable
}

// Version reports the schema version of the database behind q; 0 means no
// migration has been applied.
func Version(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, `SELECT COALESCE(MAX(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// ErrSchemaTooOld is returned by Require when the database has not been
// migrated far enough for the calling service.
var ErrSchemaTooOld = errors.New("database schema is older than this service needs")

// Require fails with ErrSchemaTooOld, naming both versions, when the
// database is older than minVersion.
func Require(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, minVersion int64) error {
	v, err := Version(ctx, q)
	if err != nil {
		return err
	}
	if v < minVersion {
		return fmt.Errorf("%w: database is at version %d, this service needs version %d or newer; run `control-api migrate` first", ErrSchemaTooOld, v, minVersion)
	}
	return nil
}
