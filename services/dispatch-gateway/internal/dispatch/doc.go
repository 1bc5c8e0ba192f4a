// Package dispatch is the gateway's data plane: the Registry of connected
// worker streams and their free slots, and the one Dispatcher loop that
// claims for all of them, woken by JobsReady when jobs are inserted (the
// app subscribes it to pulse_jobs_ready on the process's LISTEN
// connection, pkg/server/pglisten).
//
// One claim loop per gateway (not per worker) is what makes database load
// scale with gateways and work instead of with idle connections; claiming
// only for free slots is what keeps a job from sitting leased in a worker's
// memory waiting for a slot.
package dispatch
