package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// StoredSpanContext is the span context a job row stores (its traceparent
// and tracestate columns), read through the W3C propagator: an invalid or
// unsupported traceparent gives an invalid SpanContext.
func StoredSpanContext(traceparent, tracestate string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		carrier["tracestate"] = tracestate
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), carrier)
	return trace.SpanContextFromContext(ctx)
}

// TraceID is the 32-hex trace id of a stored traceparent, or "" when it
// holds no valid one (what a dashboard link or an exemplar shows).
func TraceID(traceparent string) string {
	sc := StoredSpanContext(traceparent, "")
	if !sc.TraceID().IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
