// Package pulsetype holds the types that the SDK, the services and the
// store share: a job's status, a job about to be inserted, a claimed
// attempt, a worker's result and its acknowledgement.
//
// It is a leaf: it imports nothing else of pulse, so an application, a
// service or a test can name these types without pulling in the storage
// package (pkg/server/jobstore) or its dependencies. The store reads and
// writes them; it keeps only the shapes of its own rows (ADR-0028).
package pulsetype
