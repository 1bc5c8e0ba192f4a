// Package adminhttp serves the HTTP surface every pulse service exposes on
// its admin port: /metrics for Prometheus, /healthz for liveness and /readyz
// for readiness. control-api mounts its JSON API on the same mux with Handle.
package adminhttp
