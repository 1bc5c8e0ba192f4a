package api

import "github.com/prometheus/client_golang/prometheus"

// Metrics are control-api's own pulse_* metrics, every name declared here.
type Metrics struct {
	// JobsSubmitted counts jobs newly enqueued, by topic.
	JobsSubmitted *prometheus.CounterVec
	// SubmitDuplicates counts submits answered with an existing job because
	// their idempotency key matched, by topic.
	SubmitDuplicates *prometheus.CounterVec
	// InsertRows observes the rows of every INSERT the submit coalescer
	// issues; a mean above 1 is coalescing at work.
	InsertRows prometheus.Histogram
}

// NewMetrics registers control-api's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		JobsSubmitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_jobs_submitted_total",
			Help: "Jobs newly enqueued through control-api, by topic.",
		}, []string{"topic"}),
		SubmitDuplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_submit_duplicates_total",
			Help: "Submits that matched a live job's idempotency key and enqueued nothing, by topic.",
		}, []string{"topic"}),
		InsertRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pulse_submit_insert_rows",
			Help:    "Rows per coalesced submit INSERT statement.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
	}
	reg.MustRegister(m.JobsSubmitted, m.SubmitDuplicates, m.InsertRows)
	return m
}

func (m *Metrics) submitted(topic string, duplicate bool) {
	if m == nil {
		return
	}
	if duplicate {
		m.SubmitDuplicates.WithLabelValues(topic).Inc()
		return
	}
	m.JobsSubmitted.WithLabelValues(topic).Inc()
}
