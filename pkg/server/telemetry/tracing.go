package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace/noop"
)

// The standard variables SetupTracing itself consults; the exporters and the
// SDK read the rest (headers, timeouts, sampler, batch sizes) on their own.
const (
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// SetupTracing installs the global tracer provider and propagator and
// returns the function that flushes and stops them at shutdown.
//
// Spans are exported over OTLP only when asked for: an OTLP endpoint is set
// or OTEL_TRACES_EXPORTER=otlp. Otherwise, and always when
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none, a no-op provider is
// installed so an unconfigured service neither records spans nor logs
// connection errors. The protocol is gRPC unless OTEL_EXPORTER_OTLP_PROTOCOL
// (or its _TRACES_ form) says http/protobuf. service and version become
// service.name and service.version; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override them.
func SetupTracing(ctx context.Context, service, version string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
		propagation.TraceContext{}, propagation.Baggage{}))

	enabled, err := exportRequested()
	if err != nil {
		return nil, err
	}
	if !enabled {
		otel.SetTracerProvider(noop.NewTracerProvider())
		return func(context.Context) error { return nil }, nil
	}

	exporter, err := newExporter(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithFromEnv(), // last, so the environment overrides
	)
	if err != nil {
		_ = exporter.Shutdown(ctx)
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(res),
	)
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("telemetry: shutdown tracer provider: %w", err)
		}
		return nil
	}, nil
}

func exportRequested() (bool, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv(EnvSDKDisabled)), "true") {
		return false, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(os.Getenv(EnvTracesExporter))); exp {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return os.Getenv(EnvEndpoint) != "" || os.Getenv(EnvTracesEndpoint) != "", nil
	default:
		return false, fmt.Errorf("telemetry: %s: unsupported exporter %q (want otlp or none)", EnvTracesExporter, exp)
	}
}

func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	name, protocol := EnvTracesProtocol, os.Getenv(EnvTracesProtocol)
	if protocol == "" {
		name, protocol = EnvProtocol, os.Getenv(EnvProtocol)
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch strings.TrimSpace(protocol) {
	case "", "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: %s: unsupported protocol %q (want grpc or http/protobuf)", name, protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: create OTLP exporter: %w", err)
	}
	return exp, nil
}
