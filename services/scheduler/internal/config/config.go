// Package config is the scheduler's configuration: one struct read from
// PULSE_* environment variables once, in main.
package config

import (
	"time"

	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
)

// Defaults, named so the operations guide and the code say the same thing.
const (
	AdminAddrDefault       = ":9103"
	DBMaxConnsDefault      = 4
	ShutdownTimeoutDefault = 20 * time.Second
	ScheduleBatchDefault   = 100
	// ScheduleReconcileDefault is the longest the loop sleeps without
	// looking at schedules, should a NOTIFY be lost.
	ScheduleReconcileDefault = time.Second
)

// Config is every setting the scheduler reads.
type Config struct {
	DatabaseURL     string        `envconfig:"DATABASE_URL" required:"true"`
	AdminAddr       string        `envconfig:"ADMIN_ADDR" default:":9103"`
	LogLevel        string        `envconfig:"LOG_LEVEL" default:"info"`
	DBMaxConns      int32         `envconfig:"DB_MAX_CONNS" default:"4"`
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"20s"`
	// ScheduleBatch is the most schedules one fire transaction locks.
	ScheduleBatch int `envconfig:"SCHEDULE_BATCH" default:"100"`
	// ScheduleReconcile caps every sleep of the fire loop (at most 1s).
	ScheduleReconcile time.Duration `envconfig:"SCHEDULE_RECONCILE" default:"1s"`
	// MetricsMaxTopics and MetricsTopicIdle bound the topic label of the
	// scheduler's metrics (pkg/server/metrics).
	MetricsMaxTopics int           `envconfig:"METRICS_MAX_TOPICS" default:"200"`
	MetricsTopicIdle time.Duration `envconfig:"METRICS_TOPIC_IDLE" default:"1h"`
}

// Validate checks ranges, naming the variable at fault.
func (c *Config) Validate() error {
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return config.Invalid("PULSE_LOG_LEVEL", "%v", err)
	}
	switch {
	case c.DBMaxConns < 1:
		return config.Invalid("PULSE_DB_MAX_CONNS", "is %d; it must be at least 1", c.DBMaxConns)
	case c.ScheduleBatch < 1:
		return config.Invalid("PULSE_SCHEDULE_BATCH", "is %d; it must be at least 1", c.ScheduleBatch)
	case c.ScheduleReconcile <= 0 || c.ScheduleReconcile > time.Second:
		return config.Invalid("PULSE_SCHEDULE_RECONCILE", "is %s; it must be positive and at most 1s", c.ScheduleReconcile)
	case c.ShutdownTimeout <= 0:
		return config.Invalid("PULSE_SHUTDOWN_TIMEOUT", "is %s; it must be positive", c.ShutdownTimeout)
	}
	return metrics.ValidateTopicBounds(c.MetricsMaxTopics, c.MetricsTopicIdle)
}
