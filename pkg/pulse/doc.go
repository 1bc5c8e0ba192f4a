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
// A job may carry a [Timeout] (or take its topic's, [WithTimeout]): its
// handler's context carries the deadline, and an attempt that overruns it
// fails with a [TimeoutError] and is retried. [UniqueFor] makes a job
// unique by topic and args for a period. [Worker.Use] wraps every handler
// in middleware and [WithEnqueueInterceptor] every enqueue of a client.
// To enqueue inside the application's own database transaction, see
// package pulsetx (module github.com/pulsequeue/pulse/pkg/pulsetx).
//
// [NewTopic] declares a topic with the type of its args, once, for the
// producer ([Topic.Enqueue]) and the worker ([Topic.Register]);
// [HandlerFor] adapts a function of typed args to a [Handler]. Args that
// do not decode into the type fail the attempt permanently with an
// [ArgsError]. The limits a job is held to (topic names, priority,
// attempts, durations, key length) are pulsetype's, re-exported here
// ([MinPriority] …) and checked before any request leaves the process.
//
// Package pulsetest tests an application's use of this package without a
// fleet: it runs a handler through a real worker, records what a real
// client enqueued, and runs the application's own worker against an
// in-process gateway.
//
// The package depends only on gRPC, protobuf and the OpenTelemetry API, so
// importing it never pulls in a server dependency.
package pulse
