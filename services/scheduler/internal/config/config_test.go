package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	pulseconfig "github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/config/configtest"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/services/scheduler/internal/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// These tests set environment variables, so they cannot run in parallel.

func TestDefaultsAreTheNamedConstants(t *testing.T) {
	configtest.Env(t, config.Config{}, "PULSE_DATABASE_URL", "postgres://localhost/pulse")
	var c config.Config
	require.NoError(t, pulseconfig.Load(&c))
	require.Equal(t, config.Config{
		DatabaseURL:     "postgres://localhost/pulse",
		AdminAddr:       config.AdminAddrDefault,
		LogLevel:        "info",
		DBMaxConns:      config.DBMaxConnsDefault,
		ShutdownTimeout: config.ShutdownTimeoutDefault,

		ScheduleBatch:     config.ScheduleBatchDefault,
		ScheduleReconcile: config.ScheduleReconcileDefault,
		MetricsMaxTopics:  metrics.MaxTopicsDefault,
		MetricsTopicIdle:  metrics.TopicIdleDefault,
	}, c)
}

func TestBadValuesNameTheirVariable(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"PULSE_DB_MAX_CONNS", "0"},
		{"PULSE_SHUTDOWN_TIMEOUT", "-1s"},
		{"PULSE_LOG_LEVEL", "loud"},
		{"PULSE_SCHEDULE_BATCH", "0"},
		{"PULSE_SCHEDULE_RECONCILE", "5s"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			configtest.Env(t, config.Config{}, "PULSE_DATABASE_URL", "postgres://localhost/pulse")
			configtest.RequireRefused(t, config.Config{}, tc.name, tc.value)
		})
	}
}
