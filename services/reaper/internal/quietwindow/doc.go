// Package quietwindow is the reaper's quiet window (ADR-0074): the loop
// that, when a vacuum of the jobs table is trying for the lock it needs to
// give the table's empty end back to the operating system, closes the
// gate every lifecycle transaction passes (jobstore.JobsGateKey) for a
// moment, so that the vacuum's next try finds the table free. Without it a
// queue at full rate keeps a heap an open snapshot bloated at its bloated
// size: Postgres never queues a truncation's lock request, and there is
// nearly always a claim, a report or an insert in flight.
package quietwindow
