// Package migrations holds the numbered SQL migrations that define the schema
// every pulse service shares. control-api's `migrate` subcommand applies them;
// every service checks at start that the database is at least at the version
// it needs.
package migrations

import "embed"

// FS holds every migration file, in goose's NNNNN_name.sql format.
//
//go:embed *.sql
var FS embed.FS

// Schema versions that services name as their minimum. A service refuses to
// start against a database older than the version it declares.
const (
	// VersionJobs creates jobs with its transition trigger, the claim and
	// expired-lease indexes, and the insert NOTIFY.
	VersionJobs int64 = 1
	// VersionDispatchControl adds pause state (dispatch_control, one row per
	// scope) and its audit log (control_events); the claim reads it.
	VersionDispatchControl int64 = 2
	// VersionSchedules adds schedules (At / Every / Cron), their NOTIFY on
	// pulse_schedules_changed, and the fire-history index on jobs.
	VersionSchedules int64 = 3
	// VersionCheapTopicCheck rewrites jobs_topic_format to accept the same
	// topics with a regex that costs ~40× less; Postgres evaluates it on
	// every UPDATE of a job. Nothing needs it to be correct, so no service
	// requires it.
	VersionCheapTopicCheck int64 = 4
	// VersionLifecycleGuards makes the schema guard a job's birth, life and
	// death (ADR-0002, amended): born PENDING and fresh, identity immutable,
	// error history append-only, finished jobs frozen but for a retry,
	// locked_by set only by a claim, finite and ordered timestamps, a queued
	// job always claimable, only finished jobs deleted. It repairs existing
	// rows that break the new CHECKs first. This release's statements keep
	// the rules with or without it, so no service requires it; a control-api
	// older than it clears locked_by on retry, which it refuses.
	VersionLifecycleGuards int64 = 5
	// VersionWorkerPresence adds worker_presence (the connected workers, by
	// topic and identity, refreshed by the gateways) and worker_topic_seen
	// (when each topic last had a worker). Gateways write it and refuse a
	// worker id streaming under another identity; control-api reads it to
	// explain a job nobody serves.
	VersionWorkerPresence int64 = 6
	// VersionRetryPolicy adds retry_policy (the backoff unit and cap, one
	// row) and pulse_retry_delay(attempt), which the gateways' report and
	// the reaper's sweep use to schedule a failed attempt's retry
	// (ADR-0013). Both services require it.
	VersionRetryPolicy int64 = 7
	// VersionJobTimeoutAndUniques adds jobs.timeout (how long one attempt
	// may run, 1s..24h, carried on the assignment) and job_uniques (one job
	// per topic and args per period, claimed in the statement that inserts
	// the job). control-api writes both; gateways read the timeout.
	VersionJobTimeoutAndUniques int64 = 8
	// VersionTopicLimits adds topic_limits (a topic's fleet-wide
	// max_running, ADR-0017), whose changes take the pause barrier, and the
	// index of dead-lettered jobs by topic. Gateways require it: their claim
	// reads the limits. control-api requires it: it sets them and lists
	// topics.
	VersionTopicLimits int64 = 9
	// VersionJobRetryPolicy adds a job's own retry policy (jobs.retry_base,
	// retry_max, retry_fixed: exponential with jitter, or fixed; immutable
	// like the job's identity) and the pulse_retry_delay overload that
	// takes it, which the report and the reap call (ADR-0018). control-api
	// writes the columns; gateways and the reaper read them.
	VersionJobRetryPolicy int64 = 10
	// VersionJobThroughput adds job_throughput, attempts settled per
	// minute, topic and writer, which the gateways' report and the
	// reaper's sweep add to in the statement that settles them (ADR-0018).
	VersionJobThroughput int64 = 11
	// VersionJobTimeoutImmutable adds jobs.timeout to the identity guard:
	// a job's timeout cannot change after submit. Nothing needs it to be
	// correct, so no service requires it.
	VersionJobTimeoutImmutable int64 = 12
	// VersionGuardsOffHotPath takes the schema's guards off the claim and
	// report path (ADR-0020): the guard triggers on jobs run AFTER UPDATE
	// and AFTER DELETE (no tuple lock per updated row), and the six CHECKs
	// on columns no UPDATE can change become jobs_guard_spec, a BEFORE
	// INSERT trigger that refuses with the same names. Every rule holds
	// with or without it, so no service requires it.
	VersionGuardsOffHotPath int64 = 13
	// VersionAuditRetention lets the audit of pauses (control_events) lose
	// rows older than a day, which the reaper deletes past
	// PULSE_AUDIT_RETENTION; every UPDATE and every younger row stay
	// refused. The reaper requires it.
	VersionAuditRetention int64 = 14
)

// Latest is the newest version in FS.
const Latest = VersionAuditRetention
