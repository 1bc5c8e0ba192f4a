package api

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/services/control-api/internal/queuedepth"
)

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
	// DispatchPaused is 1 while a scope ("*" or a topic) is paused.
	DispatchPaused *prometheus.GaugeVec
	// DispatchActions counts effective pauses and resumes, by action
	// (pause, resume, auto_resume); idempotent repeats are not counted.
	DispatchActions *prometheus.CounterVec
	// QueueDepth is the live jobs by topic and status (PENDING, RETRYING,
	// RUNNING), recounted on an interval by the queuedepth refresher.
	QueueDepth *prometheus.GaugeVec
	// QueueDepthCountedAt is when the depth was last counted (Unix
	// seconds) and QueueDepthCountTook how long that count took: a large
	// backlog makes the count slower and, to bound its cost, rarer.
	QueueDepthCountedAt prometheus.Gauge
	QueueDepthCountTook prometheus.Gauge
	// JobsCanceled and JobsRetried count operator actions on jobs, by topic.
	JobsCanceled *prometheus.CounterVec
	JobsRetried  *prometheus.CounterVec
	// WorkflowActions counts the operator's workflow cancels and retries
	// that acted, and WorkflowActionJobs the jobs they canceled or retried,
	// by action (cancel, retry).
	WorkflowActions    *prometheus.CounterVec
	WorkflowActionJobs *prometheus.CounterVec
	// AuthRefusals counts calls and requests refused by authentication
	// before their message or body was read, by auth.Refusal (missing,
	// invalid, rate_limited, forbidden).
	AuthRefusals *prometheus.CounterVec
	// MCPCalls counts MCP tool calls that reached their tool, by tool and
	// outcome: ok, refused (a queue tool's lease or result the fence
	// refused), or the error's code (permission_denied, invalid_argument,
	// not_found, …). Both labels are bounded: the tools are fixed, the
	// codes few.
	MCPCalls *prometheus.CounterVec
	// reg registers the waiters gauge (WatchWaiters).
	reg prometheus.Registerer

	// topics bounds the topic label of every metric above that has one
	// (BoundTopics); queueDepth bounds QueueDepth's.
	topics     *metrics.Topics
	queueDepth *metrics.TopicGauge
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
		DispatchPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_dispatch_paused",
			Help: "1 while the scope (\"*\" = global, else a topic) is paused, as control-api last read it.",
		}, []string{"scope"}),
		DispatchActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_dispatch_actions_total",
			Help: "Pauses and resumes that changed state, by action (pause, resume, auto_resume).",
		}, []string{"action"}),
		QueueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_queue_depth",
			Help: "Live jobs by topic and status (PENDING, RETRYING, RUNNING), recounted every PULSE_QUEUE_DEPTH_INTERVAL.",
		}, []string{"topic", "status"}),
		QueueDepthCountedAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_queue_depth_counted_timestamp_seconds",
			Help: "When pulse_queue_depth was last counted (Unix time); 0 until the first count.",
		}),
		QueueDepthCountTook: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_queue_depth_count_seconds",
			Help: fmt.Sprintf("How long the last pulse_queue_depth count took; the next waits at least %.0f times as long.", 1/queuedepth.MaxDuty),
		}),
	}
	m.JobsCanceled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_jobs_canceled_total",
		Help: "Jobs canceled through control-api (pending, retrying or running), by topic.",
	}, []string{"topic"})
	m.JobsRetried = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_jobs_retried_total",
		Help: "Dead-lettered or canceled jobs sent back to PENDING by an operator, by topic.",
	}, []string{"topic"})
	m.WorkflowActions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_workflow_actions_total",
		Help: "Workflow cancels and retries by an operator that acted on at least one job, by action (cancel, retry).",
	}, []string{"action"})
	m.WorkflowActionJobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_workflow_action_jobs_total",
		Help: "Jobs canceled or retried by workflow cancels and retries, by action (cancel, retry).",
	}, []string{"action"})
	m.AuthRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_auth_refusals_total",
		Help: "Calls and requests refused by authentication before their message or body was read, by reason (missing, invalid, rate_limited, forbidden).",
	}, []string{"reason"})
	m.MCPCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_mcp_tool_calls_total",
		Help: "MCP tool calls that reached their tool, by tool and outcome (ok, refused, or the error's code such as permission_denied or invalid_argument).",
	}, []string{"tool", "outcome"})
	for _, r := range auth.Refusals {
		m.AuthRefusals.WithLabelValues(string(r))
	}
	reg.MustRegister(m.AuthRefusals, m.JobsSubmitted, m.SubmitDuplicates, m.InsertRows, m.DispatchPaused, m.DispatchActions, m.QueueDepth,
		m.QueueDepthCountedAt, m.QueueDepthCountTook, m.JobsCanceled, m.JobsRetried, m.MCPCalls,
		m.WorkflowActions, m.WorkflowActionJobs)
	m.queueDepth = metrics.NewTopicGauge(m.QueueDepth, metrics.MaxTopicsDefault)
	m.reg = reg
	return m
}

// WatchWaiters exports pulse_job_waiters: the calls waiting for a job to
// finish (WaitJob, GET /v1/jobs/{id}?wait=) at each scrape, read from n.
func (m *Metrics) WatchWaiters(n func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulse_job_waiters",
		Help: "Calls waiting for a job to finish (WaitJob, GET /v1/jobs/{id}?wait=), on this process.",
	}, func() float64 { return float64(n()) }))
}

// AuthRefused counts a call or request authentication refused.
func (m *Metrics) AuthRefused(r auth.Refusal) { m.AuthRefusals.WithLabelValues(string(r)).Inc() }

// MCPCalled counts one MCP tool call.
func (m *Metrics) MCPCalled(tool, outcome string) { m.MCPCalls.WithLabelValues(tool, outcome).Inc() }

// BoundTopics bounds the topic label of every metric with one to topics
// (the service's, PULSE_METRICS_MAX_TOPICS and PULSE_METRICS_TOPIC_IDLE):
// the counters through topics.Label, the queue depth to the same cap.
// Without it the counters are unbounded and the depth holds the default cap.
func (m *Metrics) BoundTopics(topics *metrics.Topics, maxTopics int) {
	m.topics = topics
	topics.Bound(m.JobsSubmitted, m.SubmitDuplicates, m.JobsCanceled, m.JobsRetried)
	m.queueDepth = metrics.NewTopicGauge(m.QueueDepth, maxTopics)
}

// ReplaceQueueDepth sets the live job counts, every (topic, status) at
// once: at most the cap of topics, the rest under _other; a topic missing
// from samples loses its series.
func (m *Metrics) ReplaceQueueDepth(samples []metrics.TopicSample) {
	m.queueDepth.Replace(samples)
}

// QueueDepthCounted records when the depth was counted and how long it took.
func (m *Metrics) QueueDepthCounted(at time.Time, took time.Duration) {
	m.QueueDepthCountedAt.Set(float64(at.UnixNano()) / 1e9)
	m.QueueDepthCountTook.Set(took.Seconds())
}

func (m *Metrics) dispatchAction(action string) {
	if m != nil {
		m.DispatchActions.WithLabelValues(action).Inc()
	}
}

func (m *Metrics) dispatchPaused(scope string, paused bool) {
	if m == nil {
		return
	}
	v := 0.0
	if paused {
		v = 1
	}
	m.DispatchPaused.WithLabelValues(scope).Set(v)
}

// DispatchAutoResumed records the expiry sweeper's automatic resume.
func (m *Metrics) DispatchAutoResumed(scope string) {
	m.dispatchAction("auto_resume")
	m.dispatchPaused(scope, false)
}

// DispatchState sets the paused gauge of every scope in st.
func (m *Metrics) DispatchState(st jobstore.DispatchState) {
	for _, s := range st.Scopes {
		m.dispatchPaused(s.Scope, s.Paused)
	}
}

func (m *Metrics) canceled(topic string) {
	if m != nil {
		m.JobsCanceled.WithLabelValues(m.topics.Label(topic)).Inc()
	}
}

func (m *Metrics) retried(topic string) {
	if m != nil {
		m.JobsRetried.WithLabelValues(m.topics.Label(topic)).Inc()
	}
}

func (m *Metrics) submitted(topic string, duplicate bool) {
	if m == nil {
		return
	}
	if duplicate {
		m.SubmitDuplicates.WithLabelValues(m.topics.Label(topic)).Inc()
		return
	}
	m.JobsSubmitted.WithLabelValues(m.topics.Label(topic)).Inc()
}

func (m *Metrics) workflowAction(action string, jobs int64) {
	if m != nil {
		m.WorkflowActions.WithLabelValues(action).Inc()
		m.WorkflowActionJobs.WithLabelValues(action).Add(float64(jobs))
	}
}
