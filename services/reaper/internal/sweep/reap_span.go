package sweep

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/services/reaper/internal/reapmetrics"
)

// traceReaped records one span per reaped job in the job's own trace (the
// context stored at submit), linked to the sweep span that reaped it, so a
// rescue shows up where a person looks at the job. The reap happened inside
// the sweep statement, so the span covers that statement's time.
func traceReaped(sweepCtx context.Context, started time.Time, reaped []jobstore.Reaped) {
	sweep := trace.SpanContextFromContext(sweepCtx)
	if !sweep.IsValid() {
		return // tracing is off
	}
	tracer := otel.Tracer(tracerName)
	for _, r := range reaped {
		parent := context.Background()
		if r.TraceParent != "" {
			parent = otel.GetTextMapPropagator().Extract(parent,
				propagation.MapCarrier{"traceparent": r.TraceParent, "tracestate": r.TraceState})
		}
		_, span := tracer.Start(parent, "reap "+r.Topic,
			trace.WithTimestamp(started),
			trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithLinks(trace.Link{SpanContext: sweep}),
			trace.WithAttributes(
				attribute.String("messaging.system", "pulse"),
				attribute.String("messaging.operation.type", "settle"),
				attribute.String("messaging.operation.name", "reap"),
				attribute.String("messaging.destination.name", r.Topic),
				attribute.String("messaging.message.id", r.ID.String()),
				attribute.Int("pulse.attempt", int(r.Attempt)),
				attribute.String("pulse.outcome", reapmetrics.Outcome(r.Status)),
			))
		span.End()
	}
}
