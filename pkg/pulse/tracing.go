package pulse

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// tracerName names the SDK's spans' instrumentation scope.
const tracerName = "github.com/pulsequeue/pulse/pkg/pulse"

// Attribute keys from the OpenTelemetry messaging semantic conventions, plus
// pulse's own attempt number. Declared here so the SDK needs only the otel
// API, not a semconv package.
const (
	attrMessagingSystem      = attribute.Key("messaging.system")
	attrMessagingOperation   = attribute.Key("messaging.operation.type")
	attrMessagingOpName      = attribute.Key("messaging.operation.name")
	attrMessagingDestination = attribute.Key("messaging.destination.name")
	attrMessagingMessageID   = attribute.Key("messaging.message.id")
	attrMessagingBatchCount  = attribute.Key("messaging.batch.message_count")
	attrPulseAttempt         = attribute.Key("pulse.attempt")
)

// tracer returns the SDK's tracer from the global provider at call time, so
// a provider installed after the client or worker was built is still used.
func tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(tracerName) }

func messagingAttrs(op string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attrMessagingSystem.String("pulse"),
		attrMessagingOperation.String(op),
		attrMessagingOpName.String(op),
	}
}

// startPublishSpan starts the producer span of an enqueue; topic is empty
// when a batch spans topics.
func startPublishSpan(ctx context.Context, topic string, count int) (context.Context, trace.Span) {
	attrs := messagingAttrs("publish")
	name := "publish"
	if topic != "" {
		attrs = append(attrs, attrMessagingDestination.String(topic))
		name = "publish " + topic
	}
	if count > 1 {
		attrs = append(attrs, attrMessagingBatchCount.Int(count))
	}
	return tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
}

// startProcessSpan starts the consumer span around a handler, parented by the
// context the gateway sent with the assignment (already in ctx). It runs once
// per job, so its attributes are built only for a span that records: with
// tracing off they were a tenth of a worker's CPU per job. A sampler sees
// the span's name and kind, not these attributes.
func startProcessSpan(ctx context.Context, a *pulsev1.Assignment) (context.Context, trace.Span) {
	ctx, span := tracer().Start(ctx, "process "+a.GetTopic(), trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(append(messagingAttrs("process"),
			attrMessagingDestination.String(a.GetTopic()),
			attrMessagingMessageID.String(a.GetJobId()),
			attrPulseAttempt.Int(int(a.GetAttempt())),
		)...)
	}
	return ctx, span
}

// startSettleSpan starts the span of one ReportResult call. A lone result's
// settle span is the child of its process span; a batched call's links
// every result's process span (and recordBatchedSettles gives each result a
// settle span in its own trace).
func startSettleSpan(ctx context.Context, batch []pendingResult) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, len(batch))
	for _, p := range batch {
		// A lone result's process span is the parent, not a link too (a
		// link to the parent turns it into a follows-from in Jaeger).
		if p.span.IsValid() && len(batch) > 1 {
			links = append(links, trace.Link{SpanContext: p.span, Attributes: []attribute.KeyValue{
				attrMessagingMessageID.String(p.result.GetJobId()),
				attrPulseAttempt.Int(int(p.result.GetAttempt())),
			}})
		}
	}
	attrs := append(messagingAttrs("settle"), attrMessagingBatchCount.Int(len(batch)))
	if len(batch) == 1 {
		attrs = append(attrs,
			attrMessagingMessageID.String(batch[0].result.GetJobId()),
			attrPulseAttempt.Int(int(batch[0].result.GetAttempt())))
		if batch[0].span.IsValid() {
			ctx = trace.ContextWithSpanContext(ctx, batch[0].span)
		}
	}
	return tracer().Start(ctx, "settle", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrs...), trace.WithLinks(links...))
}

// recordBatchedSettles gives each result of a batched report a "settle"
// span of its own in its job's trace, a child of its process span covering
// the call and linked to the batch's settle span, so every job's trace
// shows its settle whether or not its result shared a call. A lone
// result's settle span already is in its trace.
func recordBatchedSettles(batch []pendingResult, call trace.Span, started time.Time, err error) {
	if !call.SpanContext().IsSampled() { // tracing off, or not kept
		return
	}
	recordBatchedSettlesWith(tracer(), batch, call, started, err)
}

func recordBatchedSettlesWith(tr trace.Tracer, batch []pendingResult, call trace.Span, started time.Time, err error) {
	if len(batch) < 2 {
		return
	}
	link := trace.Link{SpanContext: call.SpanContext()}
	for _, p := range batch {
		if !p.span.IsValid() {
			continue
		}
		attrs := append(messagingAttrs("settle"), attrMessagingBatchCount.Int(len(batch)),
			attrMessagingMessageID.String(p.result.GetJobId()),
			attrPulseAttempt.Int(int(p.result.GetAttempt())))
		_, span := tr.Start(trace.ContextWithSpanContext(context.Background(), p.span), "settle",
			trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(started),
			trace.WithAttributes(attrs...), trace.WithLinks(link))
		endSpan(span, err)
	}
}

// endSpan records err, if any, and ends span.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
