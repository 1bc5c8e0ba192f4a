package app_test

import (
	"log/slog"
	"testing"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/service/servicetest"
	"github.com/pulsequeue/pulse/services/reaper/internal/app"
	"github.com/pulsequeue/pulse/services/reaper/internal/config"
)

func TestShutdownFlipsReadinessBeforeTheListenersClose(t *testing.T) {
	t.Parallel()
	cfg := config.Config{
		DatabaseURL: pgtest.URL(t), AdminAddr: "127.0.0.1:0", LogLevel: "info",
		SweepInterval: config.SweepIntervalDefault, SweepBatch: config.SweepBatchDefault,
		RetentionInterval: config.RetentionIntervalDefault, RetentionBatch: config.RetentionBatchDefault,
		BreakerInterval:    config.BreakerIntervalDefault,
		RetentionCompleted: config.RetentionCompletedDefault, RetentionCanceled: config.RetentionCanceledDefault,
		RetentionDeadLettered: config.RetentionDeadLetteredDefault,
		DBMaxConns:            config.DBMaxConnsDefault, ShutdownTimeout: config.ShutdownTimeoutDefault,
	}
	servicetest.RequireReadinessFlipsBeforeListenersClose(t, app.Spec(cfg, slog.New(slog.DiscardHandler)))
}
