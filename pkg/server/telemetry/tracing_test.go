package telemetry_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/pulsequeue/pulse/pkg/server/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// These tests set process environment and the OpenTelemetry globals, so
// they cannot run in parallel.

var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
}

// cleanEnv unsets every OTEL_ variable for the test and resets the globals
// after it.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, "")
		require.NoError(t, os.Unsetenv(k))
	}
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
}

// receiver collects what an OTLP exporter sends, over HTTP or gRPC.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	got chan *coltracepb.ExportTraceServiceRequest
}

func newReceiver() *receiver {
	return &receiver{got: make(chan *coltracepb.ExportTraceServiceRequest, 16)}
}

func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.got <- req
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	msg := new(coltracepb.ExportTraceServiceRequest)
	if err := proto.Unmarshal(body, msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.got <- msg
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// startHTTP serves r over OTLP/HTTP and returns its endpoint URL.
func startHTTP(t *testing.T, r *receiver) string {
	t.Helper()
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

// startGRPC serves r over OTLP/gRPC and returns its endpoint URL.
func startGRPC(t *testing.T, r *receiver) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return "http://" + lis.Addr().String()
}

// emit records one span named name through the global provider and flushes.
func emit(t *testing.T, shutdown func(context.Context) error, name string) {
	t.Helper()
	_, span := otel.Tracer("telemetry_test").Start(t.Context(), name)
	span.End()
	require.NoError(t, shutdown(t.Context()))
}

func resourceAttrs(req *coltracepb.ExportTraceServiceRequest) map[string]string {
	out := map[string]string{}
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			out[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
	}
	return out
}

func spanNames(req *coltracepb.ExportTraceServiceRequest) []string {
	var out []string
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				out = append(out, s.GetName())
			}
		}
	}
	return out
}

func TestSetupTracing(t *testing.T) {
	t.Run("ExportsSpansOverOTLPWithTheServiceResource", func(t *testing.T) {
		for _, tc := range []struct {
			name, protocolVar, protocol string
			start                       func(*testing.T, *receiver) string
		}{
			{"HTTP", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", startHTTP},
			{"HTTPFromTheTracesVariable", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf", startHTTP},
			{"GRPCByDefault", "", "", startGRPC},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cleanEnv(t)
				r := newReceiver()
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.start(t, r))
				if tc.protocolVar != "" {
					t.Setenv(tc.protocolVar, tc.protocol)
				}

				shutdown, err := telemetry.SetupTracing(t.Context(), "reaper", "1.2.3")
				require.NoError(t, err)
				emit(t, shutdown, "reap.sweep")

				req := <-r.got
				require.Equal(t, []string{"reap.sweep"}, spanNames(req))
				attrs := resourceAttrs(req)
				require.Equal(t, "reaper", attrs["service.name"])
				require.Equal(t, "1.2.3", attrs["service.version"])
			})
		}
	})

	t.Run("LetsOTELServiceNameOverrideTheServiceName", func(t *testing.T) {
		cleanEnv(t)
		r := newReceiver()
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", startHTTP(t, r)+"/v1/traces")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
		t.Setenv("OTEL_SERVICE_NAME", "reaper-eu")

		shutdown, err := telemetry.SetupTracing(t.Context(), "reaper", "1.2.3")
		require.NoError(t, err)
		emit(t, shutdown, "reap.sweep")

		require.Equal(t, "reaper-eu", resourceAttrs(<-r.got)["service.name"])
	})

	t.Run("CreatesNoExporterWhenNothingIsConfigured", func(t *testing.T) {
		cleanEnv(t)

		shutdown, err := telemetry.SetupTracing(t.Context(), "reaper", "1.2.3")
		require.NoError(t, err)
		require.IsType(t, noop.TracerProvider{}, otel.GetTracerProvider())
		_, span := otel.Tracer("telemetry_test").Start(t.Context(), "nothing")
		require.False(t, span.IsRecording())
		span.End()
		require.NoError(t, shutdown(t.Context()))
	})

	t.Run("StaysOffWhenDisabledEvenWithAnEndpoint", func(t *testing.T) {
		for _, tc := range []struct{ name, key, value string }{
			{"SDKDisabled", "OTEL_SDK_DISABLED", "true"},
			{"ExporterNone", "OTEL_TRACES_EXPORTER", "none"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cleanEnv(t)
				r := newReceiver()
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", startHTTP(t, r))
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
				t.Setenv(tc.key, tc.value)

				shutdown, err := telemetry.SetupTracing(t.Context(), "reaper", "1.2.3")
				require.NoError(t, err)
				emit(t, shutdown, "reap.sweep")

				require.Empty(t, r.got)
			})
		}
	})

	t.Run("InstallsTraceContextAndBaggagePropagatorsEvenWhenOff", func(t *testing.T) {
		cleanEnv(t)
		shutdown, err := telemetry.SetupTracing(t.Context(), "reaper", "1.2.3")
		require.NoError(t, err)
		require.NoError(t, shutdown(t.Context()))

		require.ElementsMatch(t, []string{"traceparent", "tracestate", "baggage"},
			otel.GetTextMapPropagator().Fields())
	})

	t.Run("RejectsAnUnsupportedProtocolNamingTheVariable", func(t *testing.T) {
		cleanEnv(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")

		_, err := telemetry.SetupTracing(t.Context(), "reaper", "1.2.3")
		require.ErrorContains(t, err, `OTEL_EXPORTER_OTLP_PROTOCOL: unsupported protocol "http/json"`)
	})

	t.Run("RejectsAnUnsupportedExporterNamingTheVariable", func(t *testing.T) {
		cleanEnv(t)
		t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")

		_, err := telemetry.SetupTracing(t.Context(), "reaper", "1.2.3")
		require.ErrorContains(t, err, `OTEL_TRACES_EXPORTER: unsupported exporter "zipkin"`)
	})
}

func TestTraceID(t *testing.T) {
	t.Parallel()
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tc := range []struct{ in, want string }{
		{"00-" + id + "-00f067aa0ba902b7-01", id},
		{"00-" + id + "-00f067aa0ba902b7-00", id}, // not sampled: still its trace
		{"", ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"00-" + id + "-0000000000000000-01", ""},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""},
		{"00-" + id[:31] + "-00f067aa0ba902b7-01", ""},
		{"ff-" + id + "-00f067aa0ba902b7-01", ""},
		{"garbage", ""},
	} {
		require.Equal(t, tc.want, telemetry.TraceID(tc.in), "%q", tc.in)
	}
	sc := telemetry.StoredSpanContext("00-"+id+"-00f067aa0ba902b7-01", "vendor=x")
	require.True(t, sc.IsValid())
	require.True(t, sc.IsRemote())
	require.Equal(t, "vendor=x", sc.TraceState().String())
}
