package app

import (
	"context"
	"log/slog"

	"github.com/pulsequeue/pulse/pkg/server/migrate"

	"github.com/pulsequeue/pulse/services/control-api/internal/config"
)

// Migrate applies every pending schema migration and logs the version the
// database is now at. A second run started meanwhile waits for this one
// (goose's session lock) and then finds nothing to do.
func Migrate(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	opts := migrate.DefaultOptions()
	opts.LockTimeout = cfg.MigrateLockTimeout
	opts.LockRetries = cfg.MigrateLockRetries
	opts.Logger = logger
	v, err := migrate.Up(ctx, cfg.DatabaseURL, opts)
	if err != nil {
		return err
	}
	logger.Info("database schema is current", "version", v)
	return nil
}
