package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracingOn reports whether the global tracer provider records spans
// (SetupTracing installs the no-op provider when export is off), so a hot
// path builds per-job spans only when they go somewhere.
func TracingOn() bool {
	_, off := otel.GetTracerProvider().(noop.TracerProvider)
	return !off
}

// JobSpan records, in one job's trace, a span for work done on many jobs
// at once (a coalesced INSERT, a claim statement): named name, from started
// to now, a child of parent (the job's submit span, or its stored
// context), with attrs. Nothing is recorded when parent is not a valid
// span context: a job without a trace gets no trace of its own.
func JobSpan(tracerName, name string, parent trace.SpanContext, started time.Time, kind trace.SpanKind, attrs ...attribute.KeyValue) {
	if !parent.IsValid() {
		return
	}
	ctx := trace.ContextWithSpanContext(context.Background(), parent)
	_, span := otel.Tracer(tracerName).Start(ctx, name,
		trace.WithTimestamp(started), trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	span.End()
}
