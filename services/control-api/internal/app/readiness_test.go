package app_test

import (
	"log/slog"
	"testing"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/service/servicetest"

	"github.com/pulsequeue/pulse/services/control-api/internal/app"
	"github.com/pulsequeue/pulse/services/control-api/internal/config"
)

func TestShutdownFlipsReadinessBeforeTheListenersClose(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Auth = "none"
	cfg.DatabaseURL = pgtest.URL(t)
	cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	servicetest.RequireReadinessFlipsBeforeListenersClose(t, app.Spec(cfg, slog.New(slog.DiscardHandler)))
}
