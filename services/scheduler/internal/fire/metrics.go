package fire

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
)

// Metrics is the scheduler's instrument set; it implements Observer.
//
//   - pulse_scheduler_fires_total{topic}: jobs inserted by schedule fires.
//   - pulse_scheduler_fire_lag_seconds: occurrence time to job inserted.
//   - pulse_scheduler_missed_total{topic}: fires that skipped missed
//     occurrences (the latest fired once, the earlier ones never).
//   - pulse_schedules{state="enabled"|"due"}: schedules enabled, and
//     enabled schedules due and not yet fired, at the end of a pass.
type Metrics struct {
	Fires     *prometheus.CounterVec
	FireLag   prometheus.Histogram
	Missed    *prometheus.CounterVec
	Schedules *prometheus.GaugeVec
	// topics bounds Fires' topic label (BoundTopics); nil bounds nothing.
	topics *metrics.Topics
}

// BoundTopics bounds the topic label of Fires to topics (the service's:
// PULSE_METRICS_MAX_TOPICS, then _other).
func (m *Metrics) BoundTopics(topics *metrics.Topics) {
	m.topics = topics
	topics.Bound(m.Fires)
	topics.Bound(m.Missed)
}

var lagBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// NewMetrics registers the scheduler metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Fires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_scheduler_fires_total", Help: "Jobs inserted by schedule fires, by topic.",
		}, []string{"topic"}),
		FireLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pulse_scheduler_fire_lag_seconds", Help: "Time from a schedule's occurrence to its job's insert.", Buckets: lagBuckets,
		}),
		Missed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_scheduler_missed_total",
			Help: "Fires that skipped missed occurrences (no scheduler fired them in time: every replica down or stalled longer than the period); the latest missed occurrence fired once, the earlier ones never, by topic.",
		}, []string{"topic"}),
		Schedules: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_schedules", Help: "Schedules by state: enabled, and due (enabled and past their next_run_at).",
		}, []string{"state"}),
	}
	reg.MustRegister(m.Fires, m.FireLag, m.Missed, m.Schedules)
	m.Schedules.WithLabelValues("enabled")
	m.Schedules.WithLabelValues("due")
	return m
}

// Fired counts one fire.
func (m *Metrics) Fired(topic string, lag time.Duration) {
	m.Fires.WithLabelValues(m.topics.Label(topic)).Inc()
	m.FireLag.Observe(lag.Seconds())
}

// Skipped counts one fire that skipped missed occurrences.
func (m *Metrics) Skipped(topic string) {
	m.Missed.WithLabelValues(m.topics.Label(topic)).Inc()
}

// Counted sets the schedules gauge.
func (m *Metrics) Counted(c jobstore.ScheduleCounts) {
	m.Schedules.WithLabelValues("enabled").Set(float64(c.Enabled))
	m.Schedules.WithLabelValues("due").Set(float64(c.Due))
}
