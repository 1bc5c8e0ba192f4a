package sweep

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// TestReapSpanJoinsTheJobsTrace proves a reaped job's span is in the job's
// own trace (child of the context stored at submit) and linked to the sweep.
func TestReapSpanJoinsTheJobsTrace(t *testing.T) {
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
	sweepCtx, sweep := tp.Tracer("test").Start(context.Background(), "sweep")
	traceReaped(sweepCtx, time.Now(), []jobstore.Reaped{{
		ID: uuid.New(), Topic: "t", Status: pulsetype.StatusRetrying, Attempt: 1, TraceParent: carrier.Get("traceparent"),
	}})
	sweep.End()

	var reap sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "reap t" {
			reap = s
		}
	}
	require.NotNil(t, reap)
	require.Equal(t, submit.SpanContext().TraceID(), reap.SpanContext().TraceID())
	require.Equal(t, submit.SpanContext().SpanID(), reap.Parent().SpanID())
	require.Len(t, reap.Links(), 1)
	require.Equal(t, sweep.SpanContext().SpanID(), reap.Links()[0].SpanContext.SpanID())
}
