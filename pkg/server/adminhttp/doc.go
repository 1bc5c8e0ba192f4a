// Package adminhttp serves the HTTP surface every pulse service exposes on
// its admin port: /metrics for Prometheus, /healthz for liveness and /readyz
// for readiness. control-api mounts its JSON API and dashboard on the same
// mux with Handle.
//
// Every request gets a server span (otelhttp; named after its route
// pattern, the caller's W3C trace context its parent; the probes and
// /metrics are not traced) and is counted in
// http_server_requests_total{route,method,code} and
// http_server_request_duration_seconds{route,method}, labelled by the
// mux's pattern, never by the path.
package adminhttp
