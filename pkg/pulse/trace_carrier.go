package pulse

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// metadataCarrier lets an OpenTelemetry propagator write into outgoing gRPC
// metadata.
type metadataCarrier metadata.MD

var _ propagation.TextMapCarrier = metadataCarrier{}

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// injectTraceContext is a unary interceptor that writes the caller's trace
// context into the request metadata using the global propagator, so a job's
// trace starts at its producer. It does nothing when no propagator is set
// (the OpenTelemetry default) or when something else, such as an otelgrpc
// stats handler, already injected one.
func injectTraceContext(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	if len(md.Get("traceparent")) == 0 {
		before := len(md)
		otel.GetTextMapPropagator().Inject(ctx, metadataCarrier(md))
		if len(md) != before {
			ctx = metadata.NewOutgoingContext(ctx, md)
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// extractTraceContext puts the trace context the gateway sent with an
// assignment into ctx, so spans a handler starts join the job's trace.
func extractTraceContext(ctx context.Context, a *pulsev1.Assignment) context.Context {
	if a.GetTraceparent() == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": a.GetTraceparent()}
	if ts := a.GetTracestate(); ts != "" {
		carrier["tracestate"] = ts
	}
	return otel.GetTextMapPropagator().Extract(ctx, carrier)
}
