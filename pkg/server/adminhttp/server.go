package adminhttp

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pulsequeue/pulse/pkg/server/logging"
)

const (
	// ReadinessCheckTimeout bounds each readiness check, so one hung
	// dependency cannot stall a probe past the orchestrator's own timeout.
	ReadinessCheckTimeout = 2 * time.Second
	// ReadHeaderTimeout bounds how long a client may take to send headers.
	ReadHeaderTimeout = 5 * time.Second
	// IdleTimeout closes keep-alive connections nobody uses.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes bounds a request's headers, all that is read of a
	// request authentication refuses.
	MaxHeaderBytes = 64 << 10
)

// Server is a service's admin HTTP server. Register handlers and checks,
// then Start; call SetNotServing when shutdown begins so load balancers and
// probes stop sending traffic before the listener closes.
type Server struct {
	addr   string
	logger *slog.Logger
	mux    *http.ServeMux
	srv    *http.Server

	mu     sync.Mutex
	checks []readinessCheck

	notServing atomic.Bool
	lastReady  atomic.Bool

	tls  *tls.Config
	http *httpMetrics

	lis  net.Listener
	done chan struct{}
}

type readinessCheck struct {
	name string
	fn   func(ctx context.Context) error
}

// New returns a server for addr (":0" picks a free port) exporting reg on
// /metrics. reg must not be nil; logger may be.
func New(addr string, reg *prometheus.Registry, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	errLog := slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	s := &Server{addr: addr, logger: logger, mux: http.NewServeMux(), http: newHTTPMetrics(reg)}
	s.lastReady.Store(true)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry: reg,
		ErrorLog: errLog,
		// OpenMetrics when the scraper asks for it, so histogram exemplars
		// (a bucket's trace id) reach Prometheus and Grafana can link a
		// slow bucket to the job's trace.
		EnableOpenMetrics: true,
	}))
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.srv = &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          errLog,
	}
	return s
}

// Handle mounts h on the admin mux with a Go ServeMux pattern such as
// "POST /v1/jobs". Like http.ServeMux it panics on a conflicting pattern.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
}

// Use wraps every route, the probes and /metrics included, in mw; call it
// before Start. Authentication goes here, so a route mounted later is
// covered too; the middleware decides which routes stay open.
func (s *Server) Use(mw func(http.Handler) http.Handler) {
	s.srv.Handler = mw(s.srv.Handler)
}

// SetTLS makes Start serve HTTPS (HTTP/2 included) with cfg; nil, the
// default, is plaintext. Call it before Start. Probes must then use HTTPS.
func (s *Server) SetTLS(cfg *tls.Config) {
	s.tls = cfg
}

// AddReadinessCheck makes /readyz depend on check; a check added again under
// the same name replaces the earlier one.
func (s *Server) AddReadinessCheck(name string, check func(ctx context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.checks {
		if s.checks[i].name == name {
			s.checks[i].fn = check
			return
		}
	}
	s.checks = append(s.checks, readinessCheck{name: name, fn: check})
}

// SetNotServing makes /healthz and /readyz answer 503 from now on; call it
// first thing in shutdown.
func (s *Server) SetNotServing() {
	s.notServing.Store(true)
}

// Start binds the listener now, so a taken port fails start-up, and serves
// in the background until Shutdown.
func (s *Server) Start() error {
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("adminhttp: listen %s: %w", s.addr, err)
	}
	s.lis = lis
	s.done = make(chan struct{})
	// Outermost, around every middleware Use added: spans and request
	// metrics see refused requests too.
	s.srv.Handler = s.instrument(s.srv.Handler)
	serve := s.srv.Serve
	if s.tls != nil {
		s.srv.TLSConfig = s.tls
		// The certificate comes from TLSConfig, not from files.
		serve = func(lis net.Listener) error { return s.srv.ServeTLS(lis, "", "") }
	}
	go func() {
		defer close(s.done)
		if err := serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("admin http server stopped", logging.Error, err)
		}
	}()
	s.logger.Info("admin http listening", "addr", lis.Addr().String(), "tls", s.tls != nil)
	return nil
}

// Addr returns the bound address once Start has succeeded, or "" before.
func (s *Server) Addr() string {
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// Shutdown marks the server not serving, then stops accepting connections
// and waits for in-flight requests until ctx is done, closing them after.
func (s *Server) Shutdown(ctx context.Context) error {
	s.SetNotServing()
	if s.done == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	if err != nil {
		return fmt.Errorf("adminhttp: shutdown: %w", err)
	}
	return nil
}

// statusBody is what /healthz and /readyz answer. A failed check is named,
// never described: its error (a driver's message may name the database,
// its user or host) goes to the log.
type statusBody struct {
	Status string            `json:"status"`
	Ready  *bool             `json:"ready,omitempty"`
	Failed string            `json:"failed,omitempty"`
	Checks map[string]string `json:"checks,omitempty"`
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if s.notServing.Load() {
		writeJSON(w, http.StatusServiceUnavailable, statusBody{Status: "shutting down"})
		return
	}
	writeJSON(w, http.StatusOK, statusBody{Status: "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.notServing.Load() {
		writeJSON(w, http.StatusServiceUnavailable, statusBody{Status: "shutting down"})
		return
	}
	s.mu.Lock()
	checks := append([]readinessCheck(nil), s.checks...)
	s.mu.Unlock()

	results := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), ReadinessCheckTimeout)
			defer cancel()
			results[i] = c.fn(ctx)
		})
	}
	wg.Wait()

	body := statusBody{Status: "ready", Checks: make(map[string]string, len(checks))}
	var failed []any
	var names []string
	for i, c := range checks {
		if err := results[i]; err != nil {
			body.Checks[c.name] = "failed"
			names = append(names, c.name)
			failed = append(failed, slog.String(c.name, err.Error()))
			continue
		}
		body.Checks[c.name] = "ok"
	}
	ready := len(failed) == 0
	body.Ready = &ready
	body.Failed = strings.Join(names, ",")
	// Log transitions only: probes arrive every few seconds.
	if was := s.lastReady.Swap(ready); was != ready {
		if ready {
			s.logger.Info("ready again")
		} else {
			s.logger.Warn("not ready", slog.Group("checks", failed...))
		}
	}
	if !ready {
		body.Status = "not ready"
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) //nolint:errchkjson // the status is written; a failed body has nowhere to go
}
