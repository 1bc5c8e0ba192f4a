package gwmetrics

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

func TestQueueWaitCarriesTheJobsTraceAsExemplar(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, func() (int, int) { return 0, 0 })
	now := time.Now()
	m.now = func() time.Time { return now }
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	m.Claimed(time.Millisecond, dispatch.ClaimFromHead, []pulsetype.Claimed{
		{ID: uuid.New(), Attempt: 1, Topic: "t", SubmittedAt: now.Add(-40 * time.Millisecond), TraceParent: "00-" + traceID + "-00f067aa0ba902b7-01"},
		{ID: uuid.New(), Attempt: 1, Topic: "t", SubmittedAt: now.Add(-3 * time.Second)}, // no trace: plain observation
		// The right length, but no valid trace (an all-zero id): no
		// exemplar, as the propagator reads it.
		{ID: uuid.New(), Attempt: 1, Topic: "t", SubmittedAt: now.Add(-3 * time.Second), TraceParent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
	}, nil)
	require.Equal(t, 2, testutil.CollectAndCount(reg, "pulse_jobs_dispatched_total")+testutil.CollectAndCount(reg, "pulse_queue_wait_seconds"))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	var exemplars []string
	for _, mf := range mfs {
		if mf.GetName() != "pulse_queue_wait_seconds" {
			continue
		}
		for _, metric := range mf.GetMetric() {
			require.EqualValues(t, 3, metric.GetHistogram().GetSampleCount())
			for _, b := range metric.GetHistogram().GetBucket() {
				if e := b.GetExemplar(); e != nil {
					for _, l := range e.GetLabel() {
						exemplars = append(exemplars, l.GetName()+"="+l.GetValue())
					}
				}
			}
		}
	}
	require.Equal(t, []string{"trace_id=" + traceID}, exemplars)
	require.False(t, strings.Contains(strings.Join(exemplars, ","), "00f067aa"), "the exemplar is the trace id, not the span id")
}

// The claim statement's duration links to the trace of a job it claimed
// (whose claim span covers the statement); a claim of untraced jobs, or
// of none, is a plain observation.
func TestClaimDurationCarriesAClaimedJobsTrace(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, func() (int, int) { return 0, 0 })
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	m.Claimed(time.Millisecond, dispatch.ClaimFromHead, nil, nil)
	m.Claimed(2*time.Millisecond, dispatch.ClaimFromHead, []pulsetype.Claimed{
		{ID: uuid.New(), Attempt: 1, Topic: "t"},
		{ID: uuid.New(), Attempt: 1, Topic: "t", TraceParent: "00-" + traceID + "-00f067aa0ba902b7-01"},
	}, nil)
	m.Claimed(time.Second, dispatch.ClaimFromCursor, []pulsetype.Claimed{{ID: uuid.New(), Attempt: 1, Topic: "t"}}, nil)

	mfs, err := reg.Gather()
	require.NoError(t, err)
	var exemplars []string
	for _, mf := range mfs {
		if mf.GetName() != "pulse_claim_duration_seconds" {
			continue
		}
		for _, metric := range mf.GetMetric() {
			require.EqualValues(t, 3, metric.GetHistogram().GetSampleCount())
			for _, b := range metric.GetHistogram().GetBucket() {
				if e := b.GetExemplar(); e != nil {
					for _, l := range e.GetLabel() {
						exemplars = append(exemplars, l.GetName()+"="+l.GetValue())
					}
				}
			}
		}
	}
	require.Equal(t, []string{"trace_id=" + traceID}, exemplars)
}

func TestCountsPerTopicAndOutcomeInMixedBatches(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, func() (int, int) { return 0, 0 })
	now := time.Now()
	claimed := func(topic string, attempt int32) pulsetype.Claimed {
		return pulsetype.Claimed{ID: uuid.New(), Attempt: attempt, Topic: topic, SubmittedAt: now}
	}
	m.Claimed(time.Millisecond, dispatch.ClaimFromHead, []pulsetype.Claimed{
		claimed("a", 1), claimed("a", 2), claimed("b", 1), claimed("a", 1), claimed("c", 3),
	}, nil)
	require.Equal(t, 3.0, testutil.ToFloat64(m.Dispatched.WithLabelValues("a")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Dispatched.WithLabelValues("b")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Dispatched.WithLabelValues("c")))
	require.Equal(t, 2, testutil.CollectAndCount(m.QueueWait),
		"queue wait is observed for first attempts only, so topic c (a retry) has no series")

	ack := func(topic string, status pulsetype.Status) pulsetype.Ack {
		return pulsetype.Ack{Accepted: true, Topic: topic, Status: status, StartedAt: now}
	}
	m.Reported([]pulsetype.Ack{
		ack("a", pulsetype.StatusCompleted), ack("a", pulsetype.StatusRetrying), ack("a", pulsetype.StatusCompleted),
		{Accepted: false}, ack("b", pulsetype.StatusCompleted), ack("a", pulsetype.StatusCompleted),
	})
	require.Equal(t, 3.0, testutil.ToFloat64(m.Settled.WithLabelValues("a", "completed")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Settled.WithLabelValues("a", "retried")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Settled.WithLabelValues("b", "completed")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Rejected))
	require.Equal(t, 3, testutil.CollectAndCount(m.RunDuration))
}
