package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// Reaped is one job whose lapsed lease the sweep settled.
type Reaped struct {
	ID       uuid.UUID
	Topic    string
	Status   pulsetype.Status // RETRYING or DEAD_LETTERED
	Attempt  int32
	LockedBy string
	// TraceParent and TraceState are the trace context stored at submit, so
	// the reaper's span for this job can link to the job's trace.
	TraceParent string
	TraceState  string
}

// LeaseExpiredError is the error-history text for a reaped attempt.
const LeaseExpiredError = "worker lease expired"

// reapSQL routes RUNNING jobs whose lease has lapsed through the normal
// retry path, exactly as a failure report the worker did not live to make
// (the same RETRYING or DEAD_LETTERED outcome, the same retryDelaySQL
// wait, with LeaseExpiredError in the history). It walks
// jobs_expired_lease_idx oldest lease first and takes at most $1 rows, so
// a huge expired set is settled in bounded transactions. SKIP LOCKED plus
// the status guard make concurrent reapers safe: a row leaves RUNNING
// once, so it is reaped once. The same statement adds what it settled to
// job_throughput (countSettledSQL, writer $2), as failed attempts, and
// wakes the gateways for the limited topics whose room it freed
// (wakeLimitedSQL, as the report does).
//
// The settling UPDATE's fence is written as the report's is,
//
//	(j.status || '') = 'RUNNING'
//
// so the planner cannot match it to jobs_expired_lease_idx's predicate:
// written j.status = 'RUNNING' it could, and on some statistics it read
// every lapsed lease into memory and compared each with the batch, a cost
// quadratic in a mass expiry. A primary-key probe per picked job is the
// only plan left.
var reapSQL = reapStatement("")

// reapRecentSQL is reapSQL for the leases that lapsed at most $3
// microseconds ago: the walk of jobs_expired_lease_idx starts there
// instead of at the index's head. Under a snapshot held open (a long
// analytics query) the head holds the entry of every job that ran since
// it opened, none of which Postgres may clean up yet, and a walk from the
// head visits them all to find nothing (0.3-1.1 s a sweep in the soak,
// ADR-0067).
var reapRecentSQL = reapStatement(" AND lease_until >= now() - $3::bigint * interval '1 microsecond'")

// reapStatement is the reap with bound added to the walk's condition.
func reapStatement(bound string) string {
	return `
WITH expired AS (
    SELECT id FROM jobs
    WHERE status = 'RUNNING' AND lease_until < now()` + bound + `
    ORDER BY lease_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), settled AS (
    UPDATE jobs AS j
    SET status = CASE WHEN j.attempts - j.snoozes >= j.max_attempts THEN 'DEAD_LETTERED' ELSE 'RETRYING' END,
        finished_at = CASE WHEN j.attempts - j.snoozes >= j.max_attempts THEN now() ELSE NULL END,
        next_run_at = CASE WHEN j.attempts - j.snoozes >= j.max_attempts THEN j.next_run_at
                           ELSE now() + ` + retryDelaySQL + ` END,
        lease_until = NULL,
        errors = j.errors || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempts, 'error', '` + LeaseExpiredError + `', 'worker', j.locked_by, 'at', now()))
    FROM expired
    WHERE j.id = ANY (ARRAY[expired.id]) AND (j.status || '') = 'RUNNING' AND j.lease_until < now()
    RETURNING j.id, j.topic, j.status, j.attempts, COALESCE(j.locked_by, '') AS locked_by,
              COALESCE(j.traceparent, '') AS traceparent, COALESCE(j.tracestate, '') AS tracestate
), ` + countSettled(2) + `, ` + wakeLimitedSQL + `, ` + notifySettledSQL + `
SELECT id, topic, status, attempts, locked_by, traceparent, tracestate FROM settled
` + wokenFilter
}

// Reap settles up to limit expired leases in one statement, which counts
// them in job_throughput under the store's writer.
func (s *Store) Reap(ctx context.Context, limit int) ([]Reaped, error) {
	return s.reap(ctx, reapSQL, []any{limit, s.writer})
}

// ReapRecent is Reap for the leases that lapsed at most within ago, by
// the database's clock; its walk costs what lapsed in that span, not what
// an open snapshot keeps in the index from before it. within must be
// positive.
func (s *Store) ReapRecent(ctx context.Context, limit int, within time.Duration) ([]Reaped, error) {
	if within <= 0 {
		return nil, fmt.Errorf("reap: lapsed-within span %s is not positive", within)
	}
	return s.reap(ctx, reapRecentSQL, []any{limit, s.writer, within.Microseconds()})
}

func (s *Store) reap(ctx context.Context, sql string, args []any) ([]Reaped, error) {
	var out []Reaped
	err := s.queryPinned(ctx, sql, args, func(rows pgx.Rows) error {
		var r Reaped
		var status string
		if err := rows.Scan(&r.ID, &r.Topic, &status, &r.Attempt, &r.LockedBy, &r.TraceParent, &r.TraceState); err != nil {
			return err
		}
		r.Status = pulsetype.Status(status)
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, interpretError("reap", err)
	}
	return out, nil
}
