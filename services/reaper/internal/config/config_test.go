package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	pulseconfig "github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/services/reaper/internal/config"
)

// clearEnv unsets every variable the reaper reads, so the test sees the
// defaults whatever the machine's environment holds. t.Setenv restores them.
func clearEnv(t *testing.T) {
	vars, err := pulseconfig.Vars(config.Config{})
	require.NoError(t, err)
	for _, v := range vars {
		t.Setenv(v, "")
		require.NoError(t, os.Unsetenv(v))
	}
}

// These tests set environment variables, so they cannot run in parallel.

func TestDefaultsAreTheNamedConstants(t *testing.T) {
	clearEnv(t)
	t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
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
		RetentionCompleted:    config.RetentionCompletedDefault,
		RetentionCanceled:     config.RetentionCanceledDefault,
		RetentionDeadLettered: config.RetentionDeadLetteredDefault,
		RetentionBatch:        config.RetentionBatchDefault,
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
		{"PULSE_DB_MAX_CONNS", "1"},
		{"PULSE_SHUTDOWN_TIMEOUT", "0s"},
		{"PULSE_LOG_LEVEL", "loud"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
			if tc.value == "" {
				require.NoError(t, os.Unsetenv(tc.name))
			} else {
				t.Setenv(tc.name, tc.value)
			}
			var c config.Config
			err := pulseconfig.Load(&c)
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.name), "error %q does not name %s", err, tc.name)
		})
	}
}

func TestAZeroRetentionAgeIsAllowed(t *testing.T) {
	clearEnv(t)
	t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
	t.Setenv("PULSE_RETENTION_COMPLETED", "0s")
	var c config.Config
	require.NoError(t, pulseconfig.Load(&c))
	require.Zero(t, c.RetentionCompleted)
	t.Setenv("PULSE_THROUGHPUT_RETENTION", "0s")
	require.NoError(t, pulseconfig.Load(&c))
	require.Zero(t, c.ThroughputRetention)
}
