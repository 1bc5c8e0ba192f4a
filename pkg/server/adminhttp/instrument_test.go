package adminhttp_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pulsequeue/pulse/pkg/server/adminhttp"
)

func TestInstrumentation(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := adminhttp.New("127.0.0.1:0", reg, nil)
	var seen trace.SpanContext
	s.Handle("GET /instr/jobs/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = trace.SpanContextFromContext(r.Context())
		w.WriteHeader(http.StatusTeapot)
	}))
	// A middleware that refuses: measured too (instrumentation is outermost).
	s.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Refuse") != "" {
				http.Error(w, "no", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	require.NoError(t, s.Start())
	defer func() { require.NoError(t, s.Shutdown(t.Context())) }()

	const parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	do := func(method, path string, header http.Header) int {
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+s.Addr()+path, nil)
		require.NoError(t, err)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusTeapot, do("GET", "/instr/jobs/a1", http.Header{"Traceparent": {"00-" + parentTrace + "-00f067aa0ba902b7-01"}}))
	require.Equal(t, http.StatusTeapot, do("GET", "/instr/jobs/b2", nil))
	require.Equal(t, http.StatusForbidden, do("GET", "/instr/jobs/c3", http.Header{"X-Refuse": {"1"}}))
	require.Equal(t, http.StatusNotFound, do("GET", "/instr/random-"+strings.Repeat("x", 8), nil))
	require.Equal(t, http.StatusMethodNotAllowed, do("FROB", "/instr/jobs/a1", nil))
	require.Equal(t, http.StatusOK, do("GET", "/healthz", nil))

	count := func(route, method, code string) float64 {
		return testutil.ToFloat64(mustCounter(t, reg, route, method, code))
	}
	require.Equal(t, 2.0, count("/instr/jobs/{id}", "GET", "418"), "by pattern, never by path")
	require.Equal(t, 1.0, count("/instr/jobs/{id}", "GET", "403"))
	require.Equal(t, 1.0, count(adminhttp.RouteUnmatched, "GET", "404"))
	require.Equal(t, 1.0, count(adminhttp.RouteUnmatched, "OTHER", "405"), "an unknown method is OTHER")
	require.Equal(t, 1.0, count("/healthz", "GET", "200"))

	// The handler ran inside a server span, a child of the caller's trace.
	require.Equal(t, parentTrace, func() string {
		for _, sp := range spans.Ended() {
			if sp.Parent().TraceID().String() == parentTrace {
				require.Equal(t, "GET /instr/jobs/{id}", sp.Name())
				require.Equal(t, trace.SpanKindServer, sp.SpanKind())
				require.Contains(t, sp.Attributes(), attribute.String("http.route", "/instr/jobs/{id}"))
				return sp.SpanContext().TraceID().String()
			}
		}
		return ""
	}())
	require.True(t, seen.IsValid())
	for _, sp := range spans.Ended() {
		require.NotEqual(t, "GET /healthz", sp.Name(), "probes are not traced")
	}

	// The duration histogram carries the request's trace id as an
	// exemplar: the caller's trace for a request that sent one. (A bucket
	// keeps its latest exemplar, so this request is the last.)
	const lastTrace = "0af7651916cd43dd8448eb211c80319c"
	require.Equal(t, http.StatusTeapot, do("GET", "/instr/jobs/d4", http.Header{"Traceparent": {"00-" + lastTrace + "-b7ad6b7169203331-01"}}))
	exemplars := durationExemplars(t, reg, "/instr/jobs/{id}")
	require.Contains(t, exemplars, lastTrace, "the traced request's duration links to its trace")
	require.Empty(t, durationExemplars(t, reg, "/healthz"), "probes are not traced, so carry no exemplar")
}

// durationExemplars returns the trace ids of the exemplars on route's
// http_server_request_duration_seconds buckets.
func durationExemplars(t *testing.T, reg *prometheus.Registry, route string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var ids []string
	for _, mf := range mfs {
		if mf.GetName() != "http_server_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			matches := false
			for _, p := range m.GetLabel() {
				matches = matches || (p.GetName() == "route" && p.GetValue() == route)
			}
			if !matches {
				continue
			}
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					if l.GetName() == "trace_id" {
						ids = append(ids, l.GetValue())
					}
				}
			}
		}
	}
	return ids
}

func mustCounter(t *testing.T, reg *prometheus.Registry, route, method, code string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "http_server_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["route"] == route && l["method"] == method && l["code"] == code {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no http_server_requests_total{route=%q,method=%q,code=%q}", route, method, code)
	return nil
}
