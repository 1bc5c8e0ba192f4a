package adminhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/adminhttp"
)

// spans records every span the servers of these tests start.
var spans = tracetest.NewSpanRecorder()

func TestMain(m *testing.M) {
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	goleak.VerifyTestMain(m)
}

type testBundle struct {
	server *adminhttp.Server
	reg    *prometheus.Registry
	client *http.Client
}

func (b *testBundle) url(path string) string { return "http://" + b.server.Addr() + path }

type reply struct {
	code int
	body map[string]any
	raw  string
}

func (b *testBundle) do(t *testing.T, method, path string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.url(path), nil)
	require.NoError(t, err)
	resp, err := b.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := reply{code: resp.StatusCode, raw: string(raw)}
	if resp.Header.Get("Content-Type") == "application/json" {
		require.NoError(t, json.Unmarshal(raw, &r.body))
	}
	return r
}

// setup builds a server; the caller adds handlers and checks, then starts it.
func setup(t *testing.T) *testBundle {
	t.Helper()
	reg := prometheus.NewRegistry()
	s := adminhttp.New("127.0.0.1:0", reg, nil)
	transport := &http.Transport{}
	t.Cleanup(func() {
		require.NoError(t, s.Shutdown(context.Background()))
		transport.CloseIdleConnections()
	})
	return &testBundle{server: s, reg: reg, client: &http.Client{Transport: transport}}
}

func start(t *testing.T, b *testBundle) {
	t.Helper()
	require.NoError(t, b.server.Start())
}

func TestServer(t *testing.T) {
	t.Parallel()

	t.Run("BindsAFreePortAndReportsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Empty(t, b.server.Addr())
		start(t, b)
		_, port, err := net.SplitHostPort(b.server.Addr())
		require.NoError(t, err)
		require.NotEqual(t, "0", port)
	})

	t.Run("FailsToStartWhenThePortIsTaken", func(t *testing.T) {
		t.Parallel()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer lis.Close()

		s := adminhttp.New(lis.Addr().String(), prometheus.NewRegistry(), nil)
		require.ErrorContains(t, s.Start(), "adminhttp: listen")
	})

	t.Run("ServesTheRegistryOnMetrics", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "pulse_test_things_total", Help: "Things."})
		b.reg.MustRegister(c)
		c.Add(3)
		start(t, b)

		r := b.do(t, http.MethodGet, "/metrics")
		require.Equal(t, http.StatusOK, r.code)
		require.Contains(t, r.raw, "pulse_test_things_total 3")
	})

	t.Run("AnswersHealthzWhileRunningAnd503AfterSetNotServing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		start(t, b)

		r := b.do(t, http.MethodGet, "/healthz")
		require.Equal(t, http.StatusOK, r.code)
		require.Equal(t, map[string]any{"status": "ok"}, r.body)

		b.server.SetNotServing()
		r = b.do(t, http.MethodGet, "/healthz")
		require.Equal(t, http.StatusServiceUnavailable, r.code)
	})

	t.Run("IsReadyWhenEveryCheckPasses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.server.AddReadinessCheck("database", func(context.Context) error { return nil })
		b.server.AddReadinessCheck("gate", func(context.Context) error { return nil })
		start(t, b)

		r := b.do(t, http.MethodGet, "/readyz")
		require.Equal(t, http.StatusOK, r.code)
		require.Equal(t, map[string]any{
			"status": "ready",
			"ready":  true,
			"checks": map[string]any{"database": "ok", "gate": "ok"},
		}, r.body)
	})

	t.Run("NamesEachFailingCheckWith503AndNotItsError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.server.AddReadinessCheck("database", func(context.Context) error {
			return errors.New("failed to connect to `user=pulse database=pulsedb host=db.internal`: connection refused")
		})
		b.server.AddReadinessCheck("gate", func(context.Context) error { return nil })
		b.server.AddReadinessCheck("queue", func(context.Context) error { return errors.New("not primed") })
		start(t, b)

		r := b.do(t, http.MethodGet, "/readyz")
		require.Equal(t, http.StatusServiceUnavailable, r.code)
		require.Equal(t, map[string]any{
			"status": "not ready",
			"ready":  false,
			"failed": "database,queue",
			"checks": map[string]any{"database": "failed", "gate": "ok", "queue": "failed"},
		}, r.body)
	})

	t.Run("GivesUpOnAHungCheckAtItsTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.server.AddReadinessCheck("database", func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		start(t, b)

		r := b.do(t, http.MethodGet, "/readyz")
		require.Equal(t, http.StatusServiceUnavailable, r.code)
		require.Equal(t, "database", r.body["failed"])
	})

	t.Run("ReplacesACheckAddedAgainUnderTheSameName", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.server.AddReadinessCheck("gate", func(context.Context) error { return errors.New("not primed") })
		b.server.AddReadinessCheck("gate", func(context.Context) error { return nil })
		start(t, b)

		require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/readyz").code)
	})

	t.Run("IsNotReadyAfterSetNotServing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		start(t, b)
		b.server.SetNotServing()

		r := b.do(t, http.MethodGet, "/readyz")
		require.Equal(t, http.StatusServiceUnavailable, r.code)
		require.Equal(t, "shutting down", r.body["status"])
	})

	t.Run("MountsExtraHandlersWithMethodPatterns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.server.Handle("POST /v1/jobs", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.Copy(w, bytes.NewBufferString("created"))
		}))
		start(t, b)

		r := b.do(t, http.MethodPost, "/v1/jobs")
		require.Equal(t, http.StatusCreated, r.code)
		require.Equal(t, "created", r.raw)
		require.Equal(t, http.StatusMethodNotAllowed, b.do(t, http.MethodGet, "/v1/jobs").code)
	})

	t.Run("StopsListeningOnShutdown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		start(t, b)
		addr := b.server.Addr()

		require.NoError(t, b.server.Shutdown(t.Context()))
		_, err := net.Dial("tcp", addr)
		require.Error(t, err)
	})

	t.Run("ShutdownBeforeStartIsANoOp", func(t *testing.T) {
		t.Parallel()
		s := adminhttp.New("127.0.0.1:0", prometheus.NewRegistry(), nil)
		require.NoError(t, s.Shutdown(t.Context()))
	})
}
