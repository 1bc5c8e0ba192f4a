package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pulseconfig "github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/config/configtest"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/services/reaper/internal/config"
)

// These tests set environment variables, so they cannot run in parallel.

func TestDefaultsAreTheNamedConstants(t *testing.T) {
	configtest.Env(t, config.Config{}, "PULSE_DATABASE_URL", "postgres://localhost/pulse")
	var c config.Config
	require.NoError(t, pulseconfig.Load(&c))
	require.True(t, strings.HasPrefix(c.ReaperID, "reaper-"), "reaper-<hostname>-<pid> by default, got %q", c.ReaperID)
	require.Equal(t, config.Config{
		ReaperID:              c.ReaperID,
		ThroughputRetention:   config.ThroughputRetentionDefault,
		TopicSeenRetention:    config.TopicSeenRetentionDefault,
		AuditRetention:        config.AuditRetentionDefault,
		MetricsMaxTopics:      metrics.MaxTopicsDefault,
		MetricsTopicIdle:      metrics.TopicIdleDefault,
		DatabaseURL:           "postgres://localhost/pulse",
		AdminAddr:             config.AdminAddrDefault,
		LogLevel:              "info",
		SweepInterval:         config.SweepIntervalDefault,
		SweepBatch:            config.SweepBatchDefault,
		RetentionInterval:     config.RetentionIntervalDefault,
		BreakerInterval:       config.BreakerIntervalDefault,
		RetentionCompleted:    config.RetentionCompletedDefault,
		RetentionCanceled:     config.RetentionCanceledDefault,
		RetentionDeadLettered: config.RetentionDeadLetteredDefault,
		RetentionBatch:        config.RetentionBatchDefault,
		ReindexInterval:       config.ReindexIntervalDefault,
		ReindexBloat:          config.ReindexBloatDefault,
		ReindexMinFreedMB:     config.ReindexMinFreedMBDefault,
		QuietWindow:           config.QuietWindowDefault,
		DBMaxConns:            config.DBMaxConnsDefault,
		ShutdownTimeout:       config.ShutdownTimeoutDefault,
	}, c)
}

func TestBadValuesNameTheirVariable(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"PULSE_DATABASE_URL", ""},
		{"PULSE_SWEEP_INTERVAL", "soon"},
		{"PULSE_SWEEP_INTERVAL", "1ms"},
		{"PULSE_SWEEP_BATCH", "0"},
		{"PULSE_RETRY_BACKOFF_UNIT", "-1s"},
		{"PULSE_RETRY_BACKOFF_MAX", "1000h"},
		{"PULSE_RETENTION_INTERVAL", "0s"},
		{"PULSE_BREAKER_INTERVAL", "1ms"},
		{"PULSE_BREAKER_INTERVAL", "often"},
		{"PULSE_RETENTION_COMPLETED", "-1h"},
		{"PULSE_RETENTION_CANCELED", "-1h"},
		{"PULSE_RETENTION_DEAD_LETTERED", "-1h"},
		{"PULSE_RETENTION_BATCH", "100000"},
		{"PULSE_THROUGHPUT_RETENTION", "-1h"},
		{"PULSE_THROUGHPUT_RETENTION", "a week"},
		{"PULSE_TOPIC_SEEN_RETENTION", "-1h"},
		{"PULSE_AUDIT_RETENTION", "-1h"},
		{"PULSE_AUDIT_RETENTION", "23h"},
		{"PULSE_REAPER_ID", strings.Repeat("r", 201)},
		{"PULSE_REAPER_ID", "r\xff"},
		{"PULSE_REINDEX_INTERVAL", "10ms"},
		{"PULSE_REINDEX_INTERVAL", "-5m"},
		{"PULSE_REINDEX_BLOAT", "1.2"},
		{"PULSE_REINDEX_BLOAT", "NaN"},
		{"PULSE_REINDEX_BLOAT", "Inf"},
		{"PULSE_REINDEX_BLOAT", "four"},
		{"PULSE_REINDEX_MIN_FREED_MB", "0"},
		{"PULSE_REINDEX_MIN_FREED_MB", "99999999999999999999"},
		{"PULSE_QUIET_WINDOW", "10ms"},
		{"PULSE_QUIET_WINDOW", "2s"},
		{"PULSE_QUIET_WINDOW", "-200ms"},
		{"PULSE_DB_MAX_CONNS", "1"},
		{"PULSE_SHUTDOWN_TIMEOUT", "0s"},
		{"PULSE_LOG_LEVEL", "loud"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			configtest.Env(t, config.Config{}, "PULSE_DATABASE_URL", "postgres://localhost/pulse")
			configtest.RequireRefused(t, config.Config{}, tc.name, tc.value)
		})
	}
}

func TestTheReindexerIsOnUnlessTurnedOff(t *testing.T) {
	configtest.Env(t, config.Config{}, "PULSE_DATABASE_URL", "postgres://localhost/pulse")
	var c config.Config
	require.NoError(t, pulseconfig.Load(&c))
	require.Equal(t, time.Minute, c.ReindexInterval)
	require.Equal(t, int64(16), c.ReindexMinFreedMB)
	t.Setenv("PULSE_REINDEX_INTERVAL", "0")
	require.NoError(t, pulseconfig.Load(&c))
	require.Zero(t, c.ReindexInterval)
}

func TestTheQuietWindowIsOnUnlessTurnedOff(t *testing.T) {
	configtest.Env(t, config.Config{}, "PULSE_DATABASE_URL", "postgres://localhost/pulse")
	var c config.Config
	require.NoError(t, pulseconfig.Load(&c))
	require.Equal(t, 200*time.Millisecond, c.QuietWindow)
	t.Setenv("PULSE_QUIET_WINDOW", "0s")
	require.NoError(t, pulseconfig.Load(&c))
	require.Zero(t, c.QuietWindow)
}

func TestAZeroRetentionAgeIsAllowed(t *testing.T) {
	configtest.Env(t, config.Config{}, "PULSE_DATABASE_URL", "postgres://localhost/pulse")
	t.Setenv("PULSE_RETENTION_COMPLETED", "0s")
	var c config.Config
	require.NoError(t, pulseconfig.Load(&c))
	require.Zero(t, c.RetentionCompleted)
	t.Setenv("PULSE_THROUGHPUT_RETENTION", "0s")
	require.NoError(t, pulseconfig.Load(&c))
	require.Zero(t, c.ThroughputRetention)
}
