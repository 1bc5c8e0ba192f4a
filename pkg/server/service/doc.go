// Package service is the one way a pulse service runs. A command's main
// hands Main its Command (configuration loader, usage, subcommands) and its
// Spec; the runtime does the rest, the same for control-api,
// dispatch-gateway, reaper and scheduler:
//
//  1. configuration from PULSE_* (errors name the variable, exit 1), the
//     JSON logger, OpenTelemetry tracing from OTEL_*;
//  2. the pool, waiting for Postgres and refusing a schema older than
//     Spec.MinSchemaVersion;
//  3. the metrics registry (pulse_service_info, pulse_build_info, pool
//     metrics), the admin HTTP server (/metrics, /healthz, /readyz with the
//     database check) and, when Spec.GRPCAddr is set, the gRPC server with
//     health and reflection;
//  4. Spec.Build, which only builds the service's own parts and registers
//     them: Add for work that stops before the listeners close (loops, the
//     dispatcher, open streams), AddBackend for what request handlers need
//     until the listeners have closed (the submit coalescer, presence), Every
//     for periodic loops (package loop), Listener for the process's one
//     LISTEN connection (package pglisten);
//  5. start: the admin listener, backends, then workers in order, then the
//     gRPC listener, so a part that cannot start (the gateway's pause state
//     unreadable) keeps the service from ever taking a request; a start
//     failure stops what started and exits 1;
//  6. on SIGTERM or SIGINT, within Spec.ShutdownTimeout: readiness flips
//     first (/healthz and /readyz answer 503, gRPC health NOT_SERVING) while
//     both listeners still answer; then the wind-down: workers stop, last added
//     first, each bounded by what is left of the timeout; then the listeners
//     stop (gRPC graceful stop and HTTP shutdown, in-flight requests
//     finishing, cut when the time is up); then backends stop, the pool
//     closes and traces are flushed. A shutdown that had to cut anything
//     short exits 1.
//
// The build version (package buildinfo) is logged on the start line, set as
// the traces' service.version and exported as pulse_build_info.
package service
