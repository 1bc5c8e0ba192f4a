package app

import (
	"context"
	"log/slog"

	"github.com/pulsequeue/pulse/pkg/server/migrate"

	"github.com/pulsequeue/pulse/services/control-api/internal/config"
)

// Migrate applies every pending schema migration and logs the version the
// database is now at.
func Migrate(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	v, err := migrate.Up(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		return err
	}
	logger.Info("database schema is current", "version", v)
	return nil
}
