// Package grpcserver builds the gRPC server every gRPC-speaking pulse
// service runs, so they share one set of behaviours: OpenTelemetry spans,
// Prometheus metrics, panic recovery, one mapping of typed errors to status
// codes (apierr), keepalive limits, the standard health service and
// reflection.
//
// Stop follows the shutdown order services use: health goes NOT_SERVING
// first, so balancers and workers move away, then in-flight calls finish.
package grpcserver
