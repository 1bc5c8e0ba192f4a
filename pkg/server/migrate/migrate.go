// Package migrate applies the embedded schema migrations with goose and
// answers which schema version a database is at.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/pulsequeue/pulse/migrations"
)

// Up applies every pending migration to the database at url and returns the
// resulting version.
func Up(ctx context.Context, url string, logger *slog.Logger) (int64, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return 0, fmt.Errorf("migrate: parse database url: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithLogger(gooseLogger{logger}))
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: up: %w", err)
	}
	for _, r := range results {
		if logger != nil {
			logger.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
		}
	}
	v, err := provider.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: read version: %w", err)
	}
	return v, nil
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
// database is older than min.
func Require(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, min int64) error {
	v, err := Version(ctx, q)
	if err != nil {
		return err
	}
	if v < min {
		return fmt.Errorf("%w: database is at version %d, this service needs version %d or newer; run `control-api migrate` first", ErrSchemaTooOld, v, min)
	}
	return nil
}

type gooseLogger struct{ l *slog.Logger }

func (g gooseLogger) Printf(format string, v ...any) {
	if g.l != nil {
		g.l.Info(fmt.Sprintf(format, v...))
	} else {
		fmt.Fprintf(io.Discard, format, v...)
	}
}

func (g gooseLogger) Fatalf(format string, v ...any) {
	if g.l != nil {
		g.l.Error(fmt.Sprintf(format, v...))
	}
}
