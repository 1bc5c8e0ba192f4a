package app_test

import (
	"log/slog"
	"testing"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/service/servicetest"
	"github.com/pulsequeue/pulse/services/scheduler/internal/app"
	"github.com/pulsequeue/pulse/services/scheduler/internal/config"
)

func TestShutdownFlipsReadinessBeforeTheListenersClose(t *testing.T) {
	t.Parallel()
	cfg := config.Config{
		DatabaseURL: pgtest.URL(t), AdminAddr: "127.0.0.1:0", LogLevel: "info",
		DBMaxConns: config.DBMaxConnsDefault, ShutdownTimeout: config.ShutdownTimeoutDefault,
		ScheduleBatch: config.ScheduleBatchDefault, ScheduleReconcile: config.ScheduleReconcileDefault,
	}
	servicetest.RequireReadinessFlipsBeforeListenersClose(t, app.Spec(cfg, slog.New(slog.DiscardHandler)))
}
