// Package pulsetype holds the types that the SDK, the services and the
// store share — a job's status, a job about to be inserted, a claimed
// attempt, a worker's result and its acknowledgement — and the limits
// every job is held to (topic names, priority, attempts, durations, key,
// error and worker id lengths).
//
// It is a leaf: it imports nothing else of pulse, so an application, a
// service or a test can name these types without pulling in the storage
// package (pkg/server/jobstore) or its dependencies. The store reads and
// writes them and keeps only the shapes of its own rows; jobspec checks
// every request the services receive against the limits; the SDK's
// options check the same limits before a request leaves the process; and
// the schema's CHECK constraints hold the same numbers, which a test
// against Postgres keeps in agreement (ADR-0028).
package pulsetype
