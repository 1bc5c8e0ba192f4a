package api

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

const tracerName = "github.com/pulsequeue/pulse/services/dispatch-gateway"

// tracedAssignment starts the job's receive (dispatch) span, parented by the
// trace context stored on the job at submit and linked to the worker
// stream's span, and returns the assignment carrying the dispatch span's
// context so the worker's process span is its child. The span ends when the
// assignment has been sent (endDispatchSpans).
//
// With tracing off (the gateway installs the no-op provider) it returns no
// span and builds none of its attributes: those cost more per job than the
// assignment itself. The assignment then carries the job's stored trace
// context, as it would with a span that records nothing.
func tracedAssignment(streamCtx context.Context, j pulsetype.Claimed) (*pulsev1.Assignment, trace.Span) {
	a := assignment(j)
	if _, off := otel.GetTracerProvider().(noop.TracerProvider); off {
		return a, nil
	}
	parent := context.Background()
	if j.TraceParent != "" {
		parent = otel.GetTextMapPropagator().Extract(parent,
			propagation.MapCarrier{"traceparent": j.TraceParent, "tracestate": j.TraceState})
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "pulse"),
			attribute.String("messaging.operation.type", "receive"),
			attribute.String("messaging.operation.name", "receive"),
			attribute.String("messaging.destination.name", j.Topic),
			attribute.String("messaging.message.id", a.GetJobId()),
			attribute.Int("pulse.attempt", int(j.Attempt)),
		),
	}
	if sc := trace.SpanContextFromContext(streamCtx); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := otel.Tracer(tracerName).Start(parent, "receive "+j.Topic, opts...)
	if span.SpanContext().IsValid() {
		carrier := propagation.MapCarrier{}
		otel.GetTextMapPropagator().Inject(ctx, carrier)
		if tp := carrier.Get("traceparent"); tp != "" {
			a.Traceparent, a.Tracestate = tp, carrier.Get("tracestate")
		}
	}
	return a, span
}

// endDispatchSpans ends the spans of one sent batch, marking a failed send;
// nil spans (tracing off) are skipped.
func endDispatchSpans(spans []trace.Span, err error) {
	for _, s := range spans {
		if s == nil {
			continue
		}
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, "send assignment")
		}
		s.End()
	}
}
