package api

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// TestDispatchSpanJoinsTheJobsTrace proves the receive span is the child of
// the context stored at submit, linked to the stream's span, and that the
// assignment carries the receive span's context, not the submit's.
func TestDispatchSpanJoinsTheJobsTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})

	submitCtx, submit := tp.Tracer("test").Start(context.Background(), "submit")
	submit.End()
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(submitCtx, carrier)
	streamCtx, stream := tp.Tracer("test").Start(context.Background(), "stream")
	defer stream.End()

	job := pulsetype.Claimed{ID: uuid.New(), Topic: "t", Attempt: 2, TraceParent: carrier.Get("traceparent")}
	a, span := tracedAssignment(streamCtx, job)
	endDispatchSpans([]trace.Span{span}, errors.New("stream closed"))

	spans := rec.Ended()
	got := spans[len(spans)-1]
	require.Equal(t, "receive t", got.Name())
	require.Equal(t, trace.SpanKindConsumer, got.SpanKind())
	require.Equal(t, submit.SpanContext().TraceID(), got.SpanContext().TraceID())
	require.Equal(t, submit.SpanContext().SpanID(), got.Parent().SpanID())
	require.Len(t, got.Links(), 1)
	require.Equal(t, stream.SpanContext().SpanID(), got.Links()[0].SpanContext.SpanID())
	require.Equal(t, codes.Error, got.Status().Code)

	want := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), got.SpanContext()), want)
	require.Equal(t, want.Get("traceparent"), a.GetTraceparent(), "the assignment carries the receive span")
	attrs := map[string]string{}
	for _, kv := range got.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	require.Equal(t, "pulse", attrs["messaging.system"])
	require.Equal(t, job.ID.String(), attrs["messaging.message.id"])
	require.Equal(t, "2", attrs["pulse.attempt"])

	// A job submitted without trace context still gets a (root) span.
	a, span = tracedAssignment(context.Background(), pulsetype.Claimed{ID: uuid.New(), Topic: "t", Attempt: 1})
	span.End()
	require.NotEmpty(t, a.GetTraceparent())
}
