package jobspec_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
)

// Sets the global propagator: not parallel.
func TestWithTraceContext(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })

	ts, err := trace.ParseTraceState("vendor=x")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3},
		SpanID:     trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
		Remote:     true,
	})
	var job pulsetype.NewJob
	jobspec.WithTraceContext(trace.ContextWithRemoteSpanContext(t.Context(), sc), &job)
	require.Equal(t, "00-01020300000000000000000000000000-0405060000000000-01", job.TraceParent)
	require.Equal(t, "vendor=x", job.TraceState)

	var untraced pulsetype.NewJob
	jobspec.WithTraceContext(t.Context(), &untraced)
	require.Empty(t, untraced.TraceParent, "no span, no trace context")
	require.Empty(t, untraced.TraceState)
}
