// Package app wires control-api together: the pool, the job store, the
// submit coalescer, the ControlService on gRPC and on HTTP/JSON, and the
// admin surface (metrics, health, readiness). Every dependency is built
// here and nowhere else.
package app
