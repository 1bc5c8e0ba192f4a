// Package telemetrytest checks the spans pulse starts for a job: it
// records what the code under test starts through the global OpenTelemetry
// provider, stands in for the span control-api starts at submit, and
// asserts that a job's span joins that trace.
package telemetrytest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Record installs, as the globals, a tracer provider whose ended spans the
// returned recorder holds and the W3C trace-context propagator, and puts
// the previous ones back when the test ends. A test that calls it must not
// run in parallel with others that start spans.
func Record(t testing.TB) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	return rec, tp
}

// Submitted starts and ends a "submit" span of tp, as control-api does for
// a job it stores, and returns that span's context and the traceparent the
// job's row keeps.
func Submitted(tp trace.TracerProvider) (trace.SpanContext, string) {
	ctx, span := tp.Tracer("test").Start(context.Background(), "submit")
	span.End()
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return span.SpanContext(), carrier.Get("traceparent")
}

// RequireJoinsJob requires that got is in the job's trace, a child of the
// submit span, and linked to one span: linked (the stream or sweep that
// handled the job).
func RequireJoinsJob(t testing.TB, got sdktrace.ReadOnlySpan, submit, linked trace.SpanContext) {
	t.Helper()
	require.Equal(t, submit.TraceID(), got.SpanContext().TraceID(), "%s is in the job's trace", got.Name())
	require.Equal(t, submit.SpanID(), got.Parent().SpanID(), "%s is a child of the submit span", got.Name())
	require.Len(t, got.Links(), 1, "%s links one span", got.Name())
	require.Equal(t, linked.SpanID(), got.Links()[0].SpanContext.SpanID(), "%s links the span that handled the job", got.Name())
}
