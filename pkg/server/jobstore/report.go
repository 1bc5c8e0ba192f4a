package jobstore

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// retryDelaySQL is the wait before failed attempt j.attempts may run
// again: the schema's pulse_retry_delay (migrations 00007 and 00010,
// ADR-0013, ADR-0018), given the retry_policy row and the job's own
// policy (its retry_base, retry_max and retry_fixed columns). The row is
// read by two uncorrelated subqueries, which Postgres runs once per
// statement (InitPlans), and the function is inlined, so the statement
// costs what the formula written out cost. The report and the reap share
// it: a failure and a lapsed lease back off alike, and neither service
// holds the numbers.
const retryDelaySQL = `pulse_retry_delay(j.attempts - j.snoozes,
            (SELECT backoff_unit FROM retry_policy), (SELECT backoff_max FROM retry_policy),
            j.retry_base, j.retry_max, j.retry_fixed)`

// reportSQL settles a batch of attempts in one statement. Each result is
// fenced by status RUNNING + locked_by + attempt, so a stale attempt (reaped
// and re-claimed, canceled, or someone else's) changes nothing; Report then
// reads the rows it did not settle, to say why.
//
//	complete                         → COMPLETED
//	fail, attempts left              → RETRYING, next_run_at = now + the
//	                                   result's retry_after if it has one,
//	                                   else pulse_retry_delay(attempts, …)
//	fail on the last attempt,
//	or fail permanently              → DEAD_LETTERED
//	snooze                           → PENDING, next_run_at = now + the
//	                                   result's retry_after, snoozes + 1:
//	                                   the attempt is not spent (ADR-0044)
//
// "Attempts left" is max_attempts minus the attempts spent, attempts -
// snoozes: attempts stays the lease's fencing token, which every claim
// raises and nothing lowers, so a snooze cannot hand a stale worker's
// attempt number to the next claim.
//
// Failures append {attempt, error, worker, at} to the error history. A
// completion stores its result ($7, NULL for none; the schema refuses a
// result on any other status, jobs_result_only_completed). The same
// statement adds what it settled to job_throughput (countSettledSQL,
// writer $8) and wakes the waiters of what it finished
// (notifySettledSQL).
//
// The RUNNING fence is written on purpose as
//
//	(status || '') = 'RUNNING'
//
// the same test, but the planner cannot match it to the partial index
// jobs_expired_lease_idx (WHERE status = 'RUNNING'). With statistics taken
// while no job ran, that index looks like "one row" and the planner walked
// every RUNNING row once per result instead of looking each id up in the
// primary key: measured at 20-25 ms per 100-result report instead of 3 ms,
// for as long as the connection kept the prepared plan. The id lookup is
// now the only index the statement can use.
//
// And the lookup is written j.id = ANY (ARRAY[r.id]), not j.id = r.id:
// the same test, but not one a hash or merge join can use, so the only
// way left to join the batch to jobs is a primary-key probe per result
// (pinnedPlanSQL says why that matters; the claim and the reap do the
// same).
//
// Every settled row left RUNNING, so it freed room under its topic's
// limit, if the topic has one: wakeLimitedSQL tells every gateway at
// commit. A SELECT in a WITH runs only if the statement reads it; the
// final WHERE (wokenFilter) reads it once (an InitPlan, a one-time filter
// that is always true), so the wake costs the unlimited topics one look
// at topic_limits per distinct topic per statement.
var reportSQL = `
WITH settled AS (` + reportUpdateSQL + `
), ` + countSettled(8) + `, ` + wakeLimitedSQL + `, ` + notifySettledSQL + `
SELECT id, attempts, status, topic, submitted_at, started_at, next_run_at FROM settled
` + wokenFilter

// wakeLimitedSQL notifies ReadyChannel once per limited topic among the
// rows of the CTE settled, which left RUNNING (ADR-0024): the report's
// and the reaper's. A topic at its limit leaves its claims short,
// and a gateway treats a group whose claim came back short as exhausted
// until something says jobs may be ready; without this, room freed by a
// finishing job waited for the next insert or poll tick. NOTIFY is
// delivered at commit, so the claim it wakes counts this statement's
// transitions; Postgres folds the same topic notified twice in one
// transaction into one.
const wakeLimitedSQL = `
woken AS (
    SELECT pg_notify('` + ReadyChannel + `', l.topic)
    FROM topic_limits AS l
    WHERE l.topic IN (SELECT topic FROM settled)
)`

// notifySettledSQL wakes the waiters of the jobs the CTE settled finished
// (COMPLETED, DEAD_LETTERED or CANCELED): pulse_notify_settled sends their
// ids on SettledChannel, one NOTIFY per 200, but only while some
// control-api process has a waiter (settle_listeners, migration 00002).
// With nobody waiting it costs one look at an empty table per statement.
const notifySettledSQL = `
notified AS (
    SELECT pulse_notify_settled(array_agg(id)) FROM settled WHERE status NOT IN ('RETRYING', 'PENDING')
)`

// wokenFilter ends a statement with wakeLimitedSQL and notifySettledSQL:
// the one-time filter that makes them run.
const wokenFilter = `WHERE (SELECT count(*) FROM woken) >= 0 AND (SELECT count(*) FROM notified) >= 0`

// reportUpdateSQL is reportSQL's fenced UPDATE, on its own a statement
// that settles without counting (the benchmark's baseline).
const reportUpdateSQL = `
    UPDATE jobs AS j
    SET status = CASE
            WHEN r.outcome = 1 THEN 'COMPLETED'
            WHEN r.outcome = 4 THEN 'PENDING'
            WHEN r.outcome = 3 OR j.attempts - j.snoozes >= j.max_attempts THEN 'DEAD_LETTERED'
            ELSE 'RETRYING' END,
        finished_at = CASE
            WHEN r.outcome = 4 OR (r.outcome = 2 AND j.attempts - j.snoozes < j.max_attempts) THEN NULL
            ELSE now() END,
        next_run_at = CASE
            WHEN r.outcome = 4 THEN now() + r.retry_after * interval '1 microsecond'
            WHEN r.outcome = 2 AND j.attempts - j.snoozes < j.max_attempts
            THEN now() + CASE WHEN r.retry_after > 0 THEN r.retry_after * interval '1 microsecond'
                              ELSE ` + retryDelaySQL + ` END
            ELSE j.next_run_at END,
        snoozes = j.snoozes + (r.outcome = 4)::int,
        lease_until = NULL,
        result = CASE WHEN r.outcome = 1 THEN r.result END,
        errors = CASE
            WHEN r.outcome IN (1, 4) THEN j.errors
            ELSE j.errors || jsonb_build_array(jsonb_build_object(
                'attempt', j.attempts, 'error', r.error, 'worker', j.locked_by, 'at', now()))
            END
    FROM unnest($1::text[], $2::uuid[], $3::int[], $4::smallint[], $5::text[], $6::bigint[], $7::bytea[])
         AS r(worker, id, attempt, outcome, error, retry_after, result)
    WHERE j.id = ANY (ARRAY[r.id])
      AND j.attempts = r.attempt
      AND (j.status || '') = 'RUNNING'
      AND j.locked_by = r.worker
    RETURNING j.id, j.attempts, j.status, j.topic, j.submitted_at, j.started_at, j.next_run_at`

// currentSQL reads the rows of rejected results, for the reason.
const currentSQL = `
SELECT id, status, attempts, COALESCE(locked_by, '') FROM jobs WHERE id = ANY($1::uuid[])`

// Report settles results reported by worker in one statement and answers
// each individually, in request order. A failure with attempts left waits
// what its result asks (RetryAfter), else as the job's policy or the
// retry_policy row says (retryDelaySQL); a snooze waits what it asks and
// spends no attempt. The same statement counts what it
// settled in job_throughput under the store's writer. Results may carry their own Worker
// (a gateway folding several workers' reports into one statement); those
// without one are worker's.
func (s *Store) Report(ctx context.Context, worker string, results []pulsetype.Result) ([]pulsetype.Ack, error) {
	return s.report(ctx, reportSQL, true, worker, results)
}

// report is Report with its statement: reportSQL, or, for the benchmark,
// reportUpdateSQL, which takes no writer (counted false).
func (s *Store) report(ctx context.Context, stmt string, counted bool, worker string, results []pulsetype.Result) ([]pulsetype.Ack, error) {
	if len(results) == 0 {
		return nil, nil
	}
	n := len(results)
	workers := make([]string, n)
	ids := make([][16]byte, n)
	attempts := make([]int32, n)
	outcomes := make([]int16, n)
	errs := make([]string, n)
	after := make([]int64, n)
	out := make([][]byte, n)
	for i := range results {
		if results[i].Worker == "" {
			results[i].Worker = worker
		}
	}
	// The statement settles its rows in the arrays' order: id order (lock
	// order, lock_order.go), so a heartbeat of the same jobs cannot
	// deadlock with it.
	for k, i := range inIDOrder(n, func(i int) [16]byte { return results[i].Ref.ID }) {
		r := results[i]
		workers[k], ids[k], attempts[k], outcomes[k], errs[k] = r.Worker, r.Ref.ID, r.Ref.Attempt, int16(r.Outcome), r.Error
		after[k] = r.RetryAfter.Microseconds()
		if r.Outcome == pulsetype.OutcomeComplete && r.Result != nil {
			out[k] = r.Result
		}
	}
	params := []any{workers, ids, attempts, outcomes, errs, after, out}
	if counted {
		params = append(params, s.writer)
	}
	settled := make(map[pulsetype.AttemptRef]pulsetype.Ack, n)
	err := s.queryPinned(ctx, stmt, params, func(rows pgx.Rows) error {
		var a pulsetype.Ack
		var status string
		if err := rows.Scan(uuidDest(&a.Ref.ID), &a.Ref.Attempt, &status, &a.Topic, &a.SubmittedAt, &a.StartedAt, &a.NextRunAt); err != nil {
			return err
		}
		a.Accepted, a.Status = true, pulsetype.Status(status)
		settled[a.Ref] = a
		return nil
	})
	if err != nil {
		return nil, interpretError("report", err)
	}

	acks := make([]pulsetype.Ack, n)
	var rejected []uuid.UUID
	for i, r := range results {
		if a, ok := settled[r.Ref]; ok {
			acks[i] = a
			delete(settled, r.Ref) // a duplicate entry in the batch is not settled twice
			continue
		}
		acks[i] = pulsetype.Ack{Ref: r.Ref}
		rejected = append(rejected, r.Ref.ID)
	}
	if len(rejected) == 0 {
		return acks, nil
	}
	type current struct {
		status   string
		attempts int32
		lockedBy string
	}
	cur := make(map[uuid.UUID]current, len(rejected))
	crow, err := s.pool.Query(ctx, currentSQL, uuidArray(rejected))
	if err != nil {
		return nil, interpretError("report: read rejected", err)
	}
	for crow.Next() {
		var id uuid.UUID
		var c current
		if err := crow.Scan(uuidDest(&id), &c.status, &c.attempts, &c.lockedBy); err != nil {
			crow.Close()
			return nil, interpretError("report: read rejected", err)
		}
		cur[id] = c
	}
	if err := crow.Err(); err != nil {
		return nil, interpretError("report: read rejected", err)
	}
	for i := range acks {
		if acks[i].Accepted {
			continue
		}
		if c, ok := cur[acks[i].Ref.ID]; ok {
			acks[i].Reason = rejectionReason(acks[i].Ref, results[i].Worker, &c.status, &c.attempts, c.lockedBy)
		} else {
			acks[i].Reason = rejectionReason(acks[i].Ref, worker, nil, nil, "")
		}
	}
	return acks, nil
}

func rejectionReason(ref pulsetype.AttemptRef, worker string, status *string, attempts *int32, lockedBy string) string {
	switch {
	case status == nil:
		return fmt.Sprintf("job %s not found", ref.ID)
	case *attempts != ref.Attempt:
		return fmt.Sprintf("attempt %d of job %s is stale: the job is at attempt %d (%s)", ref.Attempt, ref.ID, *attempts, *status)
	case *status != string(pulsetype.StatusRunning):
		return fmt.Sprintf("job %s is %s, not RUNNING", ref.ID, *status)
	case lockedBy != worker:
		return fmt.Sprintf("job %s attempt %d is leased to another worker", ref.ID, ref.Attempt)
	}
	return fmt.Sprintf("job %s attempt %d was settled concurrently", ref.ID, ref.Attempt)
}
