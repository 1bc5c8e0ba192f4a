package api

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/telemetry/telemetrytest"
)

// TestDispatchSpanJoinsTheJobsTrace proves the receive span is the child of
// the context stored at submit, linked to the stream's span, and that the
// assignment carries the receive span's context, not the submit's.
func TestDispatchSpanJoinsTheJobsTrace(t *testing.T) {
	rec, tp := telemetrytest.Record(t)
	submit, traceParent := telemetrytest.Submitted(tp)
	streamCtx, stream := tp.Tracer("test").Start(t.Context(), "stream")
	defer stream.End()

	job := pulsetype.Claimed{ID: uuid.New(), Topic: "t", Attempt: 2, TraceParent: traceParent}
	a, span := tracedAssignment(streamCtx, job)
	endDispatchSpans([]trace.Span{span}, errors.New("stream closed"))

	spans := rec.Ended()
	got := spans[len(spans)-1]
	require.Equal(t, "receive t", got.Name())
	require.Equal(t, trace.SpanKindConsumer, got.SpanKind())
	telemetrytest.RequireJoinsJob(t, got, submit, stream.SpanContext())
	require.Equal(t, codes.Error, got.Status().Code)

	want := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(t.Context(), got.SpanContext()), want)
	require.Equal(t, want.Get("traceparent"), a.GetTraceparent(), "the assignment carries the receive span")
	attrs := map[string]string{}
	for _, kv := range got.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	require.Equal(t, "pulse", attrs["messaging.system"])
	require.Equal(t, job.ID.String(), attrs["messaging.message.id"])
	require.Equal(t, "2", attrs["pulse.attempt"])

	// A job submitted without trace context still gets a (root) span.
	a, span = tracedAssignment(t.Context(), pulsetype.Claimed{ID: uuid.New(), Topic: "t", Attempt: 1})
	span.End()
	require.NotEmpty(t, a.GetTraceparent())
}
