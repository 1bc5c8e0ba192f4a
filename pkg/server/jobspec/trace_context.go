package jobspec

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// WithTraceContext stores the caller's W3C trace context (ctx, through the
// global propagator) on job, so the span that dispatches it, possibly
// hours later, joins the producer's trace. control-api and pkg/pulsetx
// both insert through it. The propagator already drops malformed headers;
// a trace context Postgres could not store is dropped too, as the
// propagator would, rather than refuse the job for its caller's tracing.
func WithTraceContext(ctx context.Context, job *pulsetype.NewJob) {
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	tp, ts := carrier.Get("traceparent"), carrier.Get("tracestate")
	if storable.Text("traceparent", tp) != nil || storable.Text("tracestate", ts) != nil {
		return
	}
	job.TraceParent, job.TraceState = tp, ts
}
