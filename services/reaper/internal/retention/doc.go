// Package retention is the reaper's job cleaner: the loop that deletes
// finished jobs once they are older than their status's retention age, so
// the jobs table does not grow forever. Live jobs (PENDING, RUNNING,
// RETRYING) are never touched; the statement refuses their statuses. Its
// throughput cleaner deletes the job_throughput rollup's old minutes.
package retention
