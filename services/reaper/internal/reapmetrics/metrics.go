// Package reapmetrics declares every metric the reaper exports, in one
// place (documented in docs/operations.md).
package reapmetrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/services/reaper/internal/retention"
)

// Buckets from a millisecond to a minute: a sweep is a few bounded
// statements, and one that takes seconds is worth seeing.
var sweepBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// The label values, so dashboards and code agree.
const (
	OutcomeRetried      = "retried"
	OutcomeDeadLettered = "dead_lettered"
	ResultOK            = "ok"
	ResultError         = "error"
)

// Metrics is the reaper's instrument set; it implements the lease
// sweeper's and the job cleaner's observer interfaces.
type Metrics struct {
	JobsReaped    *prometheus.CounterVec
	SweepDuration prometheus.Histogram
	Sweeps        *prometheus.CounterVec
	JobsDeleted   *prometheus.CounterVec
	RetentionRuns *prometheus.CounterVec
	// ThroughputRowsDeleted counts job_throughput rows retention deleted.
	ThroughputRowsDeleted prometheus.Counter
	// RowsPruned counts rows the pruner deleted, by table
	// (worker_presence, worker_topic_seen, control_events).
	RowsPruned *prometheus.CounterVec
	// BreakerOpen is 1 while a topic's circuit breaker is open (its
	// topic paused by the breaker), else 0, per topic with a breaker.
	BreakerOpen *prometheus.GaugeVec
	// BreakerTransitions counts breaker state changes, by topic and the
	// state entered (open, half_open, closed).
	BreakerTransitions *prometheus.CounterVec
	// BreakerRuns counts breaker evaluations, by result (ok, error).
	BreakerRuns *prometheus.CounterVec
	// IndexBloat is each of the jobs table's B-tree indexes' size over the
	// size it needs between two vacuums, as the reindexer last estimated it.
	IndexBloat *prometheus.GaugeVec
	// Reindexes counts index rebuilds, by index and result (ok, error).
	Reindexes *prometheus.CounterVec
	// QuietWindows counts quiet windows (ADR-0074), by result (closed,
	// busy, error); QuietWindowHeld is how long each closed one held the
	// gate.
	QuietWindows    *prometheus.CounterVec
	QuietWindowHeld prometheus.Histogram
	// topics bounds JobsReaped's topic label (BoundTopics); nil bounds
	// nothing.
	topics *metrics.Topics
}

// BoundTopics bounds the topic label of JobsReaped to topics (the
// service's: PULSE_METRICS_MAX_TOPICS, then _other).
func (m *Metrics) BoundTopics(topics *metrics.Topics) {
	m.topics = topics
	topics.Bound(m.JobsReaped)
	topics.Bound(m.BreakerOpen)
	topics.Bound(m.BreakerTransitions)
}

// New registers the reaper metrics on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		JobsReaped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_jobs_reaped_total", Help: "Jobs whose worker lease lapsed and the reaper settled, by topic and outcome (retried, dead_lettered).",
		}, []string{"topic", "outcome"}),
		SweepDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pulse_reaper_sweep_duration_seconds", Help: "Duration of one lease sweep: every reap batch of one tick.", Buckets: sweepBuckets,
		}),
		Sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_reaper_sweeps_total", Help: "Lease sweeps run, by result (ok, error).",
		}, []string{"result"}),
		JobsDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_jobs_deleted_total", Help: "Finished jobs deleted by retention, by status (completed, canceled, dead_lettered).",
		}, []string{"status"}),
		RetentionRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_reaper_retention_runs_total", Help: "Retention passes run, by result (ok, error).",
		}, []string{"result"}),
		ThroughputRowsDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_throughput_rows_deleted_total", Help: "job_throughput rows (counts per minute, topic and writer) deleted by retention.",
		}),
		RowsPruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_reaper_rows_pruned_total", Help: "Rows the pruner deleted, by table (worker_presence: expired presence; worker_topic_seen: topics unserved past PULSE_TOPIC_SEEN_RETENTION; control_events: audit past PULSE_AUDIT_RETENTION).",
		}, []string{"table"}),
	}
	m.BreakerOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pulse_breaker_open", Help: "1 while the topic's circuit breaker is open (the breaker paused the topic until its cooldown ends), else 0; one series per topic with a breaker.",
	}, []string{"topic"})
	m.BreakerTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_breaker_transitions_total", Help: "Circuit breaker state changes, by topic and the state entered (open, half_open, closed).",
	}, []string{"topic", "to"})
	m.BreakerRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_breaker_evaluations_total", Help: "Evaluations of every topic's circuit breaker, by result (ok, error).",
	}, []string{"result"})
	// The index label's values are the jobs table's index names: the
	// schema's, a fixed few.
	m.IndexBloat = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pulse_reaper_index_bloat_ratio", Help: "Each B-tree index of the jobs table: its size over the size the reindexer last estimated it needs between two vacuums (0: its entries not counted yet).",
	}, []string{"index"})
	m.Reindexes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_reaper_reindexes_total", Help: "Rebuilds of a bloated index of the jobs table (REINDEX INDEX CONCURRENTLY), by index and result (ok, error).",
	}, []string{"index", "result"})
	m.QuietWindows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_reaper_quiet_windows_total", Help: "Quiet windows (ADR-0074) opened for a vacuum of the jobs table trying to truncate it, by result (closed: the gate was closed; busy: the transactions holding it did not finish within the lock timeout; error).",
	}, []string{"result"})
	m.QuietWindowHeld = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "pulse_reaper_quiet_window_seconds", Help: "How long each quiet window kept the gate closed: the longest any lifecycle transaction waited at it.",
		Buckets: []float64{.005, .01, .025, .05, .1, .2, .5, 1},
	})
	reg.MustRegister(m.JobsReaped, m.SweepDuration, m.Sweeps, m.JobsDeleted, m.RetentionRuns, m.ThroughputRowsDeleted, m.RowsPruned,
		m.BreakerOpen, m.BreakerTransitions, m.BreakerRuns, m.IndexBloat, m.Reindexes, m.QuietWindows, m.QuietWindowHeld)
	// Series that exist from the first scrape, so rate() and alerts see 0.
	for _, r := range []string{ResultOK, ResultError} {
		m.BreakerRuns.WithLabelValues(r)
		m.Sweeps.WithLabelValues(r)
		m.RetentionRuns.WithLabelValues(r)
	}
	for _, r := range []string{QuietClosed, QuietBusy, ResultError} {
		m.QuietWindows.WithLabelValues(r)
	}
	for _, t := range PrunedTables {
		m.RowsPruned.WithLabelValues(t)
	}
	for _, s := range []pulsetype.Status{pulsetype.StatusCompleted, pulsetype.StatusCanceled, pulsetype.StatusDeadLettered} {
		m.JobsDeleted.WithLabelValues(StatusLabel(s))
	}
	return m
}

// Reaped counts the jobs one reap statement settled.
func (m *Metrics) Reaped(jobs []jobstore.Reaped) {
	for _, j := range jobs {
		m.JobsReaped.WithLabelValues(m.topics.Label(j.Topic), Outcome(j.Status)).Inc()
	}
}

// Swept records one whole sweep.
func (m *Metrics) Swept(took time.Duration, err error) {
	m.SweepDuration.Observe(took.Seconds())
	m.Sweeps.WithLabelValues(result(err)).Inc()
}

// Deleted counts jobs one retention statement removed.
func (m *Metrics) Deleted(status pulsetype.Status, n int64) {
	m.JobsDeleted.WithLabelValues(StatusLabel(status)).Add(float64(n))
}

// ThroughputDeleted counts job_throughput rows one retention statement
// removed.
func (m *Metrics) ThroughputDeleted(n int64) { m.ThroughputRowsDeleted.Add(float64(n)) }

// PrunedTables are the table label's values, the tables the pruner keeps
// bounded.
var PrunedTables = []string{retention.TablePresence, retention.TableTopicSeen, retention.TableControlEvents}

// Pruned counts rows of a table one pruning statement removed.
func (m *Metrics) Pruned(table string, n int64) { m.RowsPruned.WithLabelValues(table).Add(float64(n)) }

// Breakers records one breaker evaluation: the transitions it made, and
// every breaker's state after it (nil when reading them failed).
func (m *Metrics) Breakers(trs []jobstore.BreakerTransition, states []jobstore.Breaker, err error) {
	m.BreakerRuns.WithLabelValues(result(err)).Inc()
	for _, tr := range trs {
		m.BreakerTransitions.WithLabelValues(m.topics.Label(tr.Topic), string(tr.To)).Inc()
	}
	if states == nil {
		return
	}
	open := make(map[string]float64, len(states))
	for _, b := range states {
		label := m.topics.Label(b.Topic) // several topics may share _other: any open one counts
		if b.State == jobstore.BreakerOpen {
			open[label] = 1
		} else if _, ok := open[label]; !ok {
			open[label] = 0
		}
	}
	m.BreakerOpen.Reset()
	for label, v := range open {
		m.BreakerOpen.WithLabelValues(label).Set(v)
	}
}

// IndexSizes records the reindexer's estimate of every index's bloat.
func (m *Metrics) IndexSizes(sizes []jobstore.IndexSize) {
	m.IndexBloat.Reset()
	for _, s := range sizes {
		m.IndexBloat.WithLabelValues(s.Name).Set(s.Bloat())
	}
}

// Reindexed counts one rebuild.
func (m *Metrics) Reindexed(index string, err error) {
	m.Reindexes.WithLabelValues(index, result(err)).Inc()
}

// The result label of pulse_reaper_quiet_windows_total besides
// ResultError.
const (
	QuietClosed = "closed"
	QuietBusy   = "busy"
)

// QuietWindow counts one quiet window and how long it held the gate.
func (m *Metrics) QuietWindow(w jobstore.Window, err error) {
	switch {
	case err != nil:
		m.QuietWindows.WithLabelValues(ResultError).Inc()
	case w.Closed:
		m.QuietWindows.WithLabelValues(QuietClosed).Inc()
		m.QuietWindowHeld.Observe(w.Held.Seconds())
	default:
		m.QuietWindows.WithLabelValues(QuietBusy).Inc()
	}
}

// Cleaned records one whole retention pass.
func (m *Metrics) Cleaned(err error) { m.RetentionRuns.WithLabelValues(result(err)).Inc() }

// Outcome is the outcome label (and log value) of a reaped job.
func Outcome(s pulsetype.Status) string {
	if s == pulsetype.StatusDeadLettered {
		return OutcomeDeadLettered
	}
	return OutcomeRetried
}

// StatusLabel is a status as a lower-case label value.
func StatusLabel(s pulsetype.Status) string { return strings.ToLower(string(s)) }

func result(err error) string {
	if err != nil {
		return ResultError
	}
	return ResultOK
}
