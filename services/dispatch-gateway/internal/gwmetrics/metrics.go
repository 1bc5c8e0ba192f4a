// Package gwmetrics declares every metric the dispatch-gateway exports, in
// one place (documented in docs/operations.md).
package gwmetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

// Buckets that resolve both milliseconds and minutes.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// Metrics is the gateway's instrument set; it implements the dispatcher's
// and the API's observer interfaces.
type Metrics struct {
	Dispatched    *prometheus.CounterVec
	Settled       *prometheus.CounterVec
	Rejected      prometheus.Counter
	QueueWait     *prometheus.HistogramVec
	RunDuration   *prometheus.HistogramVec
	ClaimDuration prometheus.Histogram
	// Claims counts claims by where they started (dispatch.ClaimFromHead,
	// ClaimFromCursor, ClaimRescan).
	Claims *prometheus.CounterVec
	// ClaimedJobs counts the jobs those claims took, by the same label.
	ClaimedJobs *prometheus.CounterVec
	// BehindCursor counts the jobs of lookbacks and rescans that sorted
	// before their group's cursor (dispatch.Observer.ClaimedBehind).
	BehindCursor    *prometheus.CounterVec
	ClaimErrors     prometheus.Counter
	ClaimBatch      prometheus.Histogram
	UndeliveredJobs prometheus.Counter
	SentJobs        prometheus.Counter
	Workers         prometheus.GaugeFunc
	FreeSlots       prometheus.GaugeFunc
	// ClaimErrorsByReason counts failed claim statements by
	// dispatch.ClaimErrorReason (data, unavailable, other).
	ClaimErrorsByReason *prometheus.CounterVec
	// Pause (internal/pause): the gate's view of dispatch_control.
	DispatchPaused    *prometheus.GaugeVec
	GateRefreshErrors prometheus.Counter
	GateFlip          prometheus.Histogram
	PausedWakeups     prometheus.Counter
	// PresenceErrors counts failed worker_presence statements
	// (internal/presence).
	PresenceErrors prometheus.Counter
	// AuthRefusals counts calls refused before they were read, by
	// auth.Refusal (missing, invalid, rate_limited, forbidden).
	AuthRefusals *prometheus.CounterVec
	// ExcessCredit counts credit slots refused because the stream did not
	// hold that many jobs (a worker crediting beyond its concurrency).
	ExcessCredit prometheus.Counter
	now          func() time.Time
	// topics bounds the topic label (BoundTopics); nil bounds nothing.
	topics *metrics.Topics
}

// BoundTopics bounds the topic label of Dispatched, Settled, QueueWait and
// RunDuration to topics (the service's: PULSE_METRICS_MAX_TOPICS, then
// _other; a topic idle for PULSE_METRICS_TOPIC_IDLE loses its series).
func (m *Metrics) BoundTopics(topics *metrics.Topics) {
	m.topics = topics
	topics.Bound(m.Dispatched, m.Settled, m.QueueWait, m.RunDuration)
}

// New registers the gateway metrics on reg. stats reports connected
// workers and free slots at scrape time.
func New(reg prometheus.Registerer, stats func() (workers, free int)) *Metrics {
	m := &Metrics{
		Dispatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_jobs_dispatched_total", Help: "Jobs claimed (moved to RUNNING) by this gateway, by topic.",
		}, []string{"topic"}),
		Settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_jobs_settled_total", Help: "Worker reports accepted, by topic and outcome (completed, retried, dead_lettered).",
		}, []string{"topic", "outcome"}),
		Rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_reports_rejected_total", Help: "Worker reports refused by the fence (stale attempt, canceled, or another worker's lease).",
		}),
		QueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pulse_queue_wait_seconds", Help: "Time from submit to the first claim, by topic.", Buckets: latencyBuckets,
		}, []string{"topic"}),
		RunDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pulse_job_run_duration_seconds", Help: "Time from claim to the accepted report, by topic and outcome.", Buckets: latencyBuckets,
		}, []string{"topic", "outcome"}),
		ClaimDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pulse_claim_duration_seconds", Help: "Duration of one claim statement.", Buckets: latencyBuckets,
		}),
		Claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_gateway_claims_total",
			Help: "Claims, by where they started (ADR-0022): head (the queue's head), cursor (after the last job the group's previous claim took), rescan (before that point first).",
		}, []string{"from"}),
		ClaimedJobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_gateway_claimed_jobs_total",
			Help: "Jobs claimed, by where their claim started (head, cursor, rescan): many found by rescans are jobs that committed later than the claims' margin allows for (ADR-0050).",
		}, []string{"from"}),
		BehindCursor: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_gateway_claimed_behind_cursor_total",
			Help: "Jobs a lookback or a rescan (from) claimed that sorted before their group's cursor less the 25 ms skew margin: inserts that committed late (ADR-0063).",
		}, []string{"from"}),
		ClaimErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_claim_errors_total", Help: "Claim statements that failed.",
		}),
		ClaimErrorsByReason: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_gateway_claim_errors_total",
			Help: "Claim statements that failed, by reason: data (Postgres refused a row or value; that group or topic backs off), unavailable (database unreachable), other.",
		}, []string{"reason"}),
		ClaimBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pulse_claim_batch_jobs", Help: "Jobs returned by one claim statement.", Buckets: []float64{0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000},
		}),
		UndeliveredJobs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_claimed_undeliverable_total", Help: "Jobs claimed for a stream that closed before they were sent (recovered by lease expiry).",
		}),
		SentJobs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_assignments_sent_total", Help: "Assignments written to worker streams.",
		}),
		Workers: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pulse_gateway_connected_workers", Help: "Worker streams connected to this gateway.",
		}, func() float64 { w, _ := stats(); return float64(w) }),
		FreeSlots: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pulse_gateway_free_slots", Help: "Free handler slots across this gateway's connected workers.",
		}, func() float64 { _, f := stats(); return float64(f) }),
		DispatchPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_dispatch_paused", Help: "1 while the scope (\"*\" = global, else a topic) is paused, as this gateway's gate sees it.",
		}, []string{"scope"}),
		GateRefreshErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_dispatch_gate_refresh_errors_total", Help: "Failed reads of the pause state; the gate kept its last known state.",
		}),
		GateFlip: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pulse_dispatch_gate_flip_seconds", Help: "Time from a pause or resume (its statement's start) to this gateway's gate holding it.", Buckets: latencyBuckets,
		}),
		PausedWakeups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_dispatch_paused_wakeups_total", Help: "Claim-lane wake-ups (poll ticks, NOTIFYs, credits) that issued no claim query because dispatch is globally paused; each lane counts its own.",
		}),
		PresenceErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_gateway_presence_errors_total", Help: "Failed worker_presence refreshes and deletes; the rows expire after PULSE_PRESENCE_TTL unless a later refresh succeeds.",
		}),
		AuthRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_auth_refusals_total", Help: "Calls refused by authentication before their message was read, by reason (missing, invalid, rate_limited, forbidden).",
		}, []string{"reason"}),
		ExcessCredit: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_gateway_excess_credits_total", Help: "Credit slots refused because the stream did not hold that many jobs: a stream never has more slots than the concurrency it opened with.",
		}),
		now: time.Now,
	}
	reg.MustRegister(m.AuthRefusals, m.Dispatched, m.Settled, m.Rejected, m.QueueWait, m.RunDuration, m.ClaimDuration, m.Claims, m.ClaimedJobs, m.BehindCursor,
		m.ClaimErrors, m.ClaimErrorsByReason, m.ClaimBatch, m.UndeliveredJobs, m.SentJobs, m.Workers, m.FreeSlots,
		m.DispatchPaused, m.GateRefreshErrors, m.GateFlip, m.PausedWakeups, m.PresenceErrors, m.ExcessCredit)
	// Every reason and start from the start, so a rate over it is 0, not
	// absent.
	for _, r := range []string{dispatch.ClaimErrorData, dispatch.ClaimErrorUnavailable, dispatch.ClaimErrorOther} {
		m.ClaimErrorsByReason.WithLabelValues(r)
	}
	for _, f := range []string{dispatch.ClaimFromHead, dispatch.ClaimFromCursor, dispatch.ClaimRescan, dispatch.ClaimLookback} {
		m.Claims.WithLabelValues(f)
		m.ClaimedJobs.WithLabelValues(f)
	}
	for _, f := range []string{dispatch.ClaimRescan, dispatch.ClaimLookback} {
		m.BehindCursor.WithLabelValues(f)
	}
	for _, r := range auth.Refusals {
		m.AuthRefusals.WithLabelValues(string(r))
	}
	return m
}

// AuthRefused counts a call authentication refused.
func (m *Metrics) AuthRefused(r auth.Refusal) { m.AuthRefusals.WithLabelValues(string(r)).Inc() }

// ExcessCredits counts credit slots refused (api.CreditObserver).
func (m *Metrics) ExcessCredits(n int) { m.ExcessCredit.Add(float64(n)) }

// PresenceFailed counts a failed worker_presence statement.
func (m *Metrics) PresenceFailed() { m.PresenceErrors.Inc() }

// ClaimsPaused counts a wake-up the pause gate kept from claiming.
func (m *Metrics) ClaimsPaused() { m.PausedWakeups.Inc() }

// GateRefreshFailed counts a failed pause-state read.
func (m *Metrics) GateRefreshFailed() { m.GateRefreshErrors.Inc() }

// GateFlipped observes a change's propagation to the gate.
func (m *Metrics) GateFlipped(latency time.Duration) { m.GateFlip.Observe(max(latency, 0).Seconds()) }

// GateState sets the paused gauge of every known scope.
func (m *Metrics) GateState(st *jobstore.DispatchState) {
	for _, s := range st.Scopes {
		v := 0.0
		if s.Paused {
			v = 1
		}
		m.DispatchPaused.WithLabelValues(s.Scope).Set(v)
	}
}

// Claimed records one claim statement.
func (m *Metrics) Claimed(took time.Duration, from string, jobs []pulsetype.Claimed, err error) {
	// The statement's exemplar is the trace of a job it claimed: each
	// claimed job's trace holds a claim span covering this statement.
	observeWithTrace(m.ClaimDuration, took.Seconds(), exemplarTrace(jobs))
	m.Claims.WithLabelValues(from).Inc()
	if err != nil {
		m.ClaimErrors.Inc()
		m.ClaimErrorsByReason.WithLabelValues(dispatch.ClaimErrorReason(err)).Inc()
		return
	}
	m.ClaimBatch.Observe(float64(len(jobs)))
	m.ClaimedJobs.WithLabelValues(from).Add(float64(len(jobs)))
	now := m.now()
	// A claim's jobs mostly share a topic: look the labelled children up
	// once per run of equal topics, not once per job (a hash of the label
	// values and a map lookup under a lock each time).
	var topic string
	var dispatched prometheus.Counter
	var wait prometheus.Observer
	for i, j := range jobs {
		if i == 0 || j.Topic != topic {
			topic = j.Topic
			dispatched, wait = m.Dispatched.WithLabelValues(m.topics.Label(topic)), nil
		}
		dispatched.Inc()
		if j.Attempt == 1 { // retries wait on their backoff, not the queue
			if wait == nil {
				wait = m.QueueWait.WithLabelValues(m.topics.Label(topic))
			}
			observeWithTrace(wait, now.Sub(j.SubmittedAt).Seconds(), j.TraceParent)
		}
	}
}

// ClaimedBehind counts the jobs of a lookback or a rescan that sorted
// before their group's cursor.
func (m *Metrics) ClaimedBehind(from string, n int) {
	m.BehindCursor.WithLabelValues(from).Add(float64(n))
}

// Undeliverable records claimed jobs whose stream vanished.
func (m *Metrics) Undeliverable(jobs []pulsetype.Claimed) { m.UndeliveredJobs.Add(float64(len(jobs))) }

// Sent records assignments written to a stream.
func (m *Metrics) Sent(n int) { m.SentJobs.Add(float64(n)) }

// Reported records settled results.
func (m *Metrics) Reported(acks []pulsetype.Ack) {
	now := m.now()
	// As in Claimed: one lookup per run of equal (topic, outcome).
	var topic, outcome string
	var settled prometheus.Counter
	var run prometheus.Observer
	for _, a := range acks {
		if !a.Accepted {
			m.Rejected.Inc()
			continue
		}
		if o := outcomeLabel(a.Status); settled == nil || a.Topic != topic || o != outcome {
			topic, outcome = a.Topic, o
			label := m.topics.Label(topic)
			settled, run = m.Settled.WithLabelValues(label, outcome), m.RunDuration.WithLabelValues(label, outcome)
		}
		settled.Inc()
		if !a.StartedAt.IsZero() {
			run.Observe(now.Sub(a.StartedAt).Seconds())
		}
	}
}

func outcomeLabel(s pulsetype.Status) string {
	switch s {
	case pulsetype.StatusCompleted:
		return "completed"
	case pulsetype.StatusRetrying:
		return "retried"
	case pulsetype.StatusDeadLettered:
		return "dead_lettered"
	case pulsetype.StatusPending:
		return "snoozed"
	}
	return "other"
}

// exemplarLookahead bounds how many of a claim's jobs are read for a
// trace to be its exemplar, so a batch of untraced jobs costs little.
const exemplarLookahead = 8

// exemplarTrace is the traceparent of the first of jobs (up to
// exemplarLookahead) that has a valid one, or "".
func exemplarTrace(jobs []pulsetype.Claimed) string {
	for _, j := range jobs[:min(len(jobs), exemplarLookahead)] {
		if j.TraceParent != "" && telemetry.TraceID(j.TraceParent) != "" {
			return j.TraceParent
		}
	}
	return ""
}

// observeWithTrace records v with the job's trace id as the exemplar when
// the job carries a valid W3C traceparent (read by the OpenTelemetry
// propagator, as the dashboard reads it).
func observeWithTrace(o prometheus.Observer, v float64, traceparent string) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok {
		if id := telemetry.TraceID(traceparent); id != "" {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": id})
			return
		}
	}
	o.Observe(v)
}
