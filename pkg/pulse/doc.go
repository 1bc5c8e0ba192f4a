// Package pulse is the Go SDK for the pulse job queue.
//
// Producers use a [Client], which talks to control-api, to enqueue, inspect,
// cancel and retry jobs. Workers use a [Worker], which talks to one or more
// dispatch-gateway replicas, to run registered [Handler]s in the
// application's own process.
//
// Delivery is at-least-once: a job can run more than once (after a lease is
// lost, a worker crashes, or a result cannot be reported in time), so
// handlers must be idempotent. [Job.ID] together with [Job.Attempt] names one
// attempt and is the natural deduplication key.
//
// The package depends only on gRPC, protobuf and the OpenTelemetry API, so
// importing it never pulls in a server dependency.
package pulse
