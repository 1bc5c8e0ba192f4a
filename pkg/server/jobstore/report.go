package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Outcome is what a worker says happened to one attempt.
type Outcome int16

// Outcomes, numbered as they travel in reportSQL.
const (
	OutcomeComplete      Outcome = 1
	OutcomeFail          Outcome = 2 // retry while attempts remain
	OutcomeFailPermanent Outcome = 3 // dead-letter now
)

// Result is one worker report.
type Result struct {
	Ref     AttemptRef
	Outcome Outcome
	Error   string
}

// Ack answers one Result. A rejected result (Accepted false) changed
// nothing; Reason says why (stale attempt, canceled, another worker's).
type Ack struct {
	Ref         AttemptRef
	Accepted    bool
	Status      Status // the job's status after the report, when accepted
	Reason      string
	Topic       string
	SubmittedAt time.Time
	StartedAt   time.Time
	NextRunAt   time.Time // when a RETRYING job becomes claimable again
}

// Backoff is the retry schedule: attempt n waits n² × Unit, at most Max.
type Backoff struct {
	Unit time.Duration
	Max  time.Duration
}

// DefaultBackoff is the seed's attempts² seconds, capped at an hour.
var DefaultBackoff = Backoff{Unit: time.Second, Max: time.Hour}

// reportSQL settles a batch of attempts in one statement. Each result is
// fenced by status RUNNING + locked_by + attempt, so a stale attempt (reaped
// and re-claimed, canceled, or someone else's) changes nothing and comes
// back with the row as it stood, for the rejection reason.
//
//	complete                         → COMPLETED
//	fail, attempts left              → RETRYING, next_run_at = now + attempts²·unit (≤ max)
//	fail on the last attempt,
//	or fail permanently              → DEAD_LETTERED
//
// Failures append {attempt, error, worker, at} to the error history.
const reportSQL = `
WITH r AS (
    SELECT * FROM unnest($2::uuid[], $3::int[], $4::smallint[], $5::text[])
        WITH ORDINALITY AS r(id, attempt, outcome, error, ord)
), settled AS (
    UPDATE jobs AS j
    SET status = CASE
            WHEN r.outcome = 1 THEN 'COMPLETED'
            WHEN r.outcome = 3 OR j.attempts >= j.max_attempts THEN 'DEAD_LETTERED'
            ELSE 'RETRYING' END,
        finished_at = CASE
            WHEN r.outcome = 2 AND j.attempts < j.max_attempts THEN NULL
            ELSE now() END,
        next_run_at = CASE
            WHEN r.outcome = 2 AND j.attempts < j.max_attempts
            THEN now() + LEAST(power(j.attempts, 2) * $6::interval, $7::interval)
            ELSE j.next_run_at END,
        lease_until = NULL,
        errors = CASE
            WHEN r.outcome = 1 THEN j.errors
            ELSE j.errors || jsonb_build_array(jsonb_build_object(
                'attempt', j.attempts, 'error', r.error, 'worker', j.locked_by, 'at', now()))
            END
    FROM r
    WHERE j.id = r.id
      AND j.attempts = r.attempt
      AND j.status = 'RUNNING'
      AND j.locked_by = $1
    RETURNING j.id, j.attempts, j.status, j.topic, j.submitted_at, j.started_at, j.next_run_at
)
SELECT r.id, r.attempt, settled.status, COALESCE(settled.topic, cur.topic, ''),
       settled.submitted_at, settled.started_at, settled.next_run_at,
       cur.status, cur.attempts, COALESCE(cur.locked_by, '')
FROM r
LEFT JOIN settled ON settled.id = r.id AND settled.attempts = r.attempt
LEFT JOIN jobs AS cur ON cur.id = r.id
ORDER BY r.ord`

// Report settles results reported by worker in one statement and answers
// each individually.
func (s *Store) Report(ctx context.Context, worker string, results []Result, backoff Backoff) ([]Ack, error) {
	if len(results) == 0 {
		return nil, nil
	}
	n := len(results)
	ids := make([]uuid.UUID, n)
	attempts := make([]int32, n)
	outcomes := make([]int16, n)
	errs := make([]string, n)
	for i, r := range results {
		ids[i], attempts[i], outcomes[i], errs[i] = r.Ref.ID, r.Ref.Attempt, int16(r.Outcome), r.Error
	}
	rows, err := s.pool.Query(ctx, reportSQL, worker, ids, attempts, outcomes, errs,
		intervalOf(backoff.Unit), intervalOf(backoff.Max))
	if err != nil {
		return nil, interpretError("report", err)
	}
	defer rows.Close()
	acks := make([]Ack, 0, n)
	for rows.Next() {
		var a Ack
		var newStatus, curStatus *string
		var submitted, started, nextRun *time.Time
		var curAttempts *int32
		var curWorker string
		if err := rows.Scan(&a.Ref.ID, &a.Ref.Attempt, &newStatus, &a.Topic, &submitted, &started, &nextRun,
			&curStatus, &curAttempts, &curWorker); err != nil {
			return nil, interpretError("report", err)
		}
		if newStatus != nil {
			a.Accepted, a.Status = true, Status(*newStatus)
			a.SubmittedAt, a.StartedAt, a.NextRunAt = deref(submitted), deref(started), deref(nextRun)
		} else {
			a.Reason = rejectionReason(a.Ref, worker, curStatus, curAttempts, curWorker)
		}
		acks = append(acks, a)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("report", err)
	}
	return acks, nil
}

func rejectionReason(ref AttemptRef, worker string, status *string, attempts *int32, lockedBy string) string {
	switch {
	case status == nil:
		return fmt.Sprintf("job %s not found", ref.ID)
	case *attempts != ref.Attempt:
		return fmt.Sprintf("attempt %d of job %s is stale: the job is at attempt %d (%s)", ref.Attempt, ref.ID, *attempts, *status)
	case *status != string(StatusRunning):
		return fmt.Sprintf("job %s is %s, not RUNNING", ref.ID, *status)
	case lockedBy != worker:
		return fmt.Sprintf("job %s attempt %d is leased to another worker", ref.ID, ref.Attempt)
	}
	return fmt.Sprintf("job %s attempt %d was settled concurrently", ref.ID, ref.Attempt)
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
