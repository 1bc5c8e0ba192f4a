package adminhttp

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/felixge/httpsnoop"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// RouteUnmatched is the route label of a request no pattern matched (404,
// 405), so a scan of random paths adds one series, not one per path.
const RouteUnmatched = "unmatched"

// httpMetrics are the standard request metrics of every pulse HTTP server,
// labelled by route pattern, never by path.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	return &httpMetrics{
		requests: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_server_requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "code"})),
		duration: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_server_request_duration_seconds",
			Help:    "Time from a request's arrival to its handler's return, by route pattern and method.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"})),
	}
}

// register registers c on reg, or returns the collector of the same
// description already there (two servers sharing a registry in a test).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// route is the pattern the mux serves r with, without its method ("GET
// /v1/jobs/{id}" → "/v1/jobs/{id}"), or RouteUnmatched.
func (s *Server) route(r *http.Request) (pattern, route string) {
	_, pattern = s.mux.Handler(r)
	if pattern == "" {
		return "", RouteUnmatched
	}
	route = pattern
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		route = strings.TrimSpace(pattern[i+1:])
	}
	return pattern, route
}

// methodLabel keeps the method label to the standard methods: anything
// else is "OTHER", as the OpenTelemetry conventions say.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// probe is a request to the probes or /metrics: counted, never traced
// (a scrape every few seconds would drown the traces that matter).
func probe(r *http.Request) bool {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics":
		return true
	}
	return false
}

// instrument wraps the whole handler chain, middleware included (so a
// refused request is measured too): a server span per request named after
// its route pattern (otelhttp; the caller's W3C trace context is its
// parent), and the request metrics.
//
// The duration is observed with the request's trace id as the exemplar
// when its span is sampled (a trace the collector keeps), so a slow bucket
// on a dashboard links to the request's trace — for a submit, the job's.
func (s *Server) instrument(next http.Handler) http.Handler {
	withRoute := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, route := s.route(r); route != RouteUnmatched {
			trace.SpanFromContext(r.Context()).SetAttributes(semconv.HTTPRoute(route))
		}
		if h, ok := r.Context().Value(spanHolderKey{}).(*spanHolder); ok {
			h.sc = trace.SpanContextFromContext(r.Context())
		}
		next.ServeHTTP(w, r)
	})
	traced := otelhttp.NewHandler(withRoute, "http.server",
		otelhttp.WithFilter(func(r *http.Request) bool { return !probe(r) }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if pattern, _ := s.route(r); pattern != "" {
				if strings.IndexByte(pattern, ' ') < 0 {
					return r.Method + " " + pattern
				}
				return pattern
			}
			return methodLabel(r.Method)
		}),
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, route := s.route(r)
		span := &spanHolder{}
		m := httpsnoop.CaptureMetrics(traced, w, r.WithContext(context.WithValue(r.Context(), spanHolderKey{}, span)))
		method := methodLabel(r.Method)
		s.http.requests.WithLabelValues(route, method, strconv.Itoa(m.Code)).Inc()
		observeWithTrace(s.http.duration.WithLabelValues(route, method), m.Duration.Seconds(), span.sc)
	})
}

// spanHolder carries the request's server span context out of otelhttp's
// handler to the metrics around it.
type spanHolder struct{ sc trace.SpanContext }

type spanHolderKey struct{}

// observeWithTrace records v with sc's trace id as the exemplar when sc is
// sampled, else plainly.
func observeWithTrace(o prometheus.Observer, v float64, sc trace.SpanContext) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok && sc.IsValid() && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	o.Observe(v)
}
