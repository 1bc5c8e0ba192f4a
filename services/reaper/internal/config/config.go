// Package config is the reaper's configuration: one struct read from
// PULSE_* environment variables once, in main.
package config

import (
	"fmt"
	"os"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/retrypolicy"
)

// Defaults, named so the operations guide and the code say the same thing.
const (
	AdminAddrDefault = ":9102"
	// SweepIntervalDefault is the lease sweep's tick: a lease that
	// lapses in place (a dead worker's) is recovered within the lease TTL
	// plus one tick; one that could first be taken already lapsed, within
	// the sweeper's whole-walk period (ADR-0067).
	SweepIntervalDefault = 10 * time.Second
	// SweepBatchDefault bounds one reap statement, so a huge backlog of
	// expired leases is settled in many short transactions, not one long one.
	SweepBatchDefault = 1000
	// RetentionIntervalDefault is how often finished jobs are pruned.
	RetentionIntervalDefault = time.Minute
	// RetentionCompletedDefault, RetentionCanceledDefault and
	// RetentionDeadLetteredDefault are how long finished jobs are kept.
	// Dead-lettered jobs are kept longest: someone has to look at them.
	RetentionCompletedDefault    = 24 * time.Hour
	RetentionCanceledDefault     = 7 * 24 * time.Hour
	RetentionDeadLetteredDefault = 30 * 24 * time.Hour
	// RetentionBatchDefault bounds one retention DELETE.
	RetentionBatchDefault = 1000
	// ThroughputRetentionDefault is how long job_throughput keeps a
	// minute's counts; the retention loop deletes older rows.
	ThroughputRetentionDefault = 7 * 24 * time.Hour
	// TopicSeenRetentionDefault is how long worker_topic_seen remembers a
	// topic no worker serves any more.
	TopicSeenRetentionDefault = 30 * 24 * time.Hour
	// AuditRetentionDefault is how long control_events keeps a pause or
	// resume.
	AuditRetentionDefault = 90 * 24 * time.Hour
	// BreakerIntervalDefault is how often the breaker loop judges every
	// topic's circuit breaker (ADR-0053): the longest a failing topic runs
	// past its threshold, and a half-open trial's outcome waits.
	BreakerIntervalDefault = 5 * time.Second
	// ReindexIntervalDefault is how often the reindexer looks (ADR-0070,
	// on by default since ADR-0075): a pass reads the catalog, and rebuilds
	// only what gives back a twentieth of the table's size, so on a table
	// of a day's jobs it rebuilds only after a purge or a long snapshot;
	// once a minute brings the indexes back within minutes of the heap.
	ReindexIntervalDefault = time.Minute
	// ReindexBloatDefault rebuilds an index at four times its estimated
	// size: well past what page splits leave in a healthy index, so only
	// the growth a long transaction or a purge leaves behind is rebuilt.
	ReindexBloatDefault = 4.0
	// ReindexMinFreedMBDefault is the least a rebuild must give back, in
	// MiB, beside a twentieth of the table (reindex.TableShare): a rebuild
	// reads the whole table twice, which is not worth a few megabytes. The
	// claim index, which holds only queued jobs, churns to a working size
	// of tens of megabytes at thousands of jobs a second; it is rebuilt at
	// most once an hour unless it doubles (reindex.Regrowth, ADR-0075).
	ReindexMinFreedMBDefault = 16
	// QuietWindowDefault is the longest the quiet window (ADR-0074) keeps
	// the gate of the jobs table's lifecycle transactions closed for a
	// vacuum that is trying to give the table's empty end back: four of
	// the vacuum's lock tries (every 50 ms). In the 30-minute soak at
	// 9,400 jobs/s with a 10-minute snapshot, windows of 0.2 s gave the
	// heap back to 1.00–1.16× its size before the snapshot (3.5 GB to
	// 0.4–0.5 GB), and with them 3 s apart no minute's lag p99 outside
	// the snapshot rose past 0.48 s. 0 turns it off.
	QuietWindowDefault     = 200 * time.Millisecond
	DBMaxConnsDefault      = 4
	ShutdownTimeoutDefault = 20 * time.Second

	// MinInterval keeps a loop from spinning on the database.
	MinInterval = 10 * time.Millisecond
	// MinReindexInterval keeps the reindexer from reading the catalog
	// in a loop.
	MinReindexInterval = time.Second
	// MinReindexBloat and MaxReindexBloat bound PULSE_REINDEX_BLOAT: below
	// 1.5 an index fresh from a rebuild could qualify again after ordinary
	// page splits; above 1,000 nothing would ever be rebuilt.
	MinReindexBloat = 1.5
	MaxReindexBloat = 1000.0
	// MaxReindexMinFreedMB is a mebibyte short of a pebibyte.
	MaxReindexMinFreedMB = 1<<30 - 1
	// MinQuietWindow and MaxQuietWindow bound PULSE_QUIET_WINDOW: shorter
	// than a few of vacuum's lock tries (every 50 ms) opens nothing, and a
	// window is a moment every submit, claim and report waits out.
	MinQuietWindow = 50 * time.Millisecond
	MaxQuietWindow = time.Second
	// MaxBatch keeps one statement's transaction short.
	MaxBatch = 10000
)

// Config is every setting the reaper reads. A retention age of zero turns
// off deletion of that status: those jobs are kept forever.
type Config struct {
	DatabaseURL   string        `envconfig:"DATABASE_URL" required:"true"`
	AdminAddr     string        `envconfig:"ADMIN_ADDR" default:":9102"`
	LogLevel      string        `envconfig:"LOG_LEVEL" default:"info"`
	SweepInterval time.Duration `envconfig:"SWEEP_INTERVAL" default:"10s"`
	SweepBatch    int           `envconfig:"SWEEP_BATCH" default:"1000"`
	// RetryBackoffUnit and RetryBackoffMax, when set, write the retry
	// policy (the retry_policy row, shared with the gateways) at start;
	// unset, the row is left as it is (ADR-0013).
	RetryBackoffUnit  config.OptionalDuration `envconfig:"RETRY_BACKOFF_UNIT"`
	RetryBackoffMax   config.OptionalDuration `envconfig:"RETRY_BACKOFF_MAX"`
	RetentionInterval time.Duration           `envconfig:"RETENTION_INTERVAL" default:"1m"`
	// BreakerInterval is the breaker loop's tick (topic_breakers).
	BreakerInterval       time.Duration `envconfig:"BREAKER_INTERVAL" default:"5s"`
	RetentionCompleted    time.Duration `envconfig:"RETENTION_COMPLETED" default:"24h"`
	RetentionCanceled     time.Duration `envconfig:"RETENTION_CANCELED" default:"168h"`
	RetentionDeadLettered time.Duration `envconfig:"RETENTION_DEAD_LETTERED" default:"720h"`
	RetentionBatch        int           `envconfig:"RETENTION_BATCH" default:"1000"`
	// ThroughputRetention is how long job_throughput keeps a minute's
	// counts; zero keeps them forever.
	ThroughputRetention time.Duration `envconfig:"THROUGHPUT_RETENTION" default:"168h"`
	// TopicSeenRetention is how long worker_topic_seen remembers when a
	// topic no worker serves any more was last served; zero keeps every
	// topic forever.
	TopicSeenRetention time.Duration `envconfig:"TOPIC_SEEN_RETENTION" default:"720h"`
	// AuditRetention is how long control_events (the pause audit) keeps a
	// row; zero keeps the audit forever, and anything else is at least
	// jobstore.AuditRetentionFloor (a day).
	AuditRetention time.Duration `envconfig:"AUDIT_RETENTION" default:"2160h"`
	// ReindexInterval is how often the reindexer looks at the jobs table's
	// indexes and rebuilds the bloated ones; zero turns it off.
	ReindexInterval time.Duration `envconfig:"REINDEX_INTERVAL" default:"1m"`
	// ReindexBloat is how many times its estimated size an index must be
	// to be rebuilt.
	ReindexBloat float64 `envconfig:"REINDEX_BLOAT" default:"4"`
	// ReindexMinFreedMB is the least, in MiB, a rebuild must give back.
	ReindexMinFreedMB int64 `envconfig:"REINDEX_MIN_FREED_MB" default:"16"`
	// QuietWindow is the longest a quiet window keeps the jobs table's
	// lifecycle transactions waiting while a vacuum truncates the table;
	// zero turns the windows off.
	QuietWindow time.Duration `envconfig:"QUIET_WINDOW" default:"200ms"`
	// MetricsMaxTopics and MetricsTopicIdle bound the topic label of the
	// reaper's metrics (pkg/server/metrics).
	MetricsMaxTopics int           `envconfig:"METRICS_MAX_TOPICS" default:"200"`
	MetricsTopicIdle time.Duration `envconfig:"METRICS_TOPIC_IDLE" default:"1h"`
	// ReaperID names this reaper where it writes: its rows in
	// job_throughput. Empty: reaper-<hostname>-<pid>.
	ReaperID        string        `envconfig:"REAPER_ID"`
	DBMaxConns      int32         `envconfig:"DB_MAX_CONNS" default:"4"`
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"20s"`
}

// Validate checks ranges and relations, naming the variable at fault.
func (c *Config) Validate() error {
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return config.Invalid("PULSE_LOG_LEVEL", "%v", err)
	}
	if err := retrypolicy.Validate(c.RetryBackoffUnit, c.RetryBackoffMax); err != nil {
		return err
	}
	switch {
	case c.SweepInterval < MinInterval:
		return config.Invalid("PULSE_SWEEP_INTERVAL", "is %s; it must be at least %s", c.SweepInterval, MinInterval)
	case c.SweepBatch < 1 || c.SweepBatch > MaxBatch:
		return config.Invalid("PULSE_SWEEP_BATCH", "is %d; it must be between 1 and %d", c.SweepBatch, MaxBatch)
	case c.RetentionInterval < MinInterval:
		return config.Invalid("PULSE_RETENTION_INTERVAL", "is %s; it must be at least %s", c.RetentionInterval, MinInterval)
	case c.BreakerInterval < MinInterval:
		return config.Invalid("PULSE_BREAKER_INTERVAL", "is %s; it must be at least %s", c.BreakerInterval, MinInterval)
	case c.RetentionCompleted < 0:
		return config.Invalid("PULSE_RETENTION_COMPLETED", "is %s; it must not be negative (0 keeps COMPLETED jobs forever)", c.RetentionCompleted)
	case c.RetentionCanceled < 0:
		return config.Invalid("PULSE_RETENTION_CANCELED", "is %s; it must not be negative (0 keeps CANCELED jobs forever)", c.RetentionCanceled)
	case c.RetentionDeadLettered < 0:
		return config.Invalid("PULSE_RETENTION_DEAD_LETTERED", "is %s; it must not be negative (0 keeps DEAD_LETTERED jobs forever)", c.RetentionDeadLettered)
	case c.RetentionBatch < 1 || c.RetentionBatch > MaxBatch:
		return config.Invalid("PULSE_RETENTION_BATCH", "is %d; it must be between 1 and %d", c.RetentionBatch, MaxBatch)
	case c.ThroughputRetention < 0:
		return config.Invalid("PULSE_THROUGHPUT_RETENTION", "is %s; it must not be negative (0 keeps throughput counts forever)", c.ThroughputRetention)
	case c.TopicSeenRetention < 0:
		return config.Invalid("PULSE_TOPIC_SEEN_RETENTION", "is %s; it must not be negative (0 keeps every topic forever)", c.TopicSeenRetention)
	case c.AuditRetention < 0 || (c.AuditRetention > 0 && c.AuditRetention < jobstore.AuditRetentionFloor):
		return config.Invalid("PULSE_AUDIT_RETENTION", "is %s; it must be 0 (keep the audit forever) or at least %s", c.AuditRetention, jobstore.AuditRetentionFloor)
	case c.QuietWindow != 0 && (c.QuietWindow < MinQuietWindow || c.QuietWindow > MaxQuietWindow):
		return config.Invalid("PULSE_QUIET_WINDOW", "is %s; it must be 0 (no windows) or between %s and %s", c.QuietWindow, MinQuietWindow, MaxQuietWindow)
	case c.ReindexInterval != 0 && c.ReindexInterval < MinReindexInterval:
		return config.Invalid("PULSE_REINDEX_INTERVAL", "is %s; it must be 0 (no rebuilds) or at least %s", c.ReindexInterval, MinReindexInterval)
	case !(c.ReindexBloat >= MinReindexBloat && c.ReindexBloat <= MaxReindexBloat):
		return config.Invalid("PULSE_REINDEX_BLOAT", "is %v; it must be between %v and %v", c.ReindexBloat, MinReindexBloat, MaxReindexBloat)
	case c.ReindexMinFreedMB < 1 || c.ReindexMinFreedMB > MaxReindexMinFreedMB:
		return config.Invalid("PULSE_REINDEX_MIN_FREED_MB", "is %d; it must be between 1 and %d", c.ReindexMinFreedMB, MaxReindexMinFreedMB)
	case c.DBMaxConns < 2:
		return config.Invalid("PULSE_DB_MAX_CONNS", "is %d; the reaper needs at least 2 (the sweep and retention run side by side)", c.DBMaxConns)
	case c.ShutdownTimeout <= 0:
		return config.Invalid("PULSE_SHUTDOWN_TIMEOUT", "is %s; it must be positive", c.ShutdownTimeout)
	}
	if err := metrics.ValidateTopicBounds(c.MetricsMaxTopics, c.MetricsTopicIdle); err != nil {
		return err
	}
	if c.ReaperID == "" {
		host, _ := os.Hostname()
		c.ReaperID = fmt.Sprintf("reaper-%s-%d", host, os.Getpid())
	}
	// The reaper id is its writer in job_throughput, which every sweep
	// statement adds to: a name the table refuses would fail them all.
	if err := jobstore.ValidWriter(c.ReaperID); err != nil {
		return config.Invalid("PULSE_REAPER_ID", "%v", err)
	}
	return nil
}
