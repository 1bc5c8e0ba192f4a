package jobstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// replaceSQL is the submit of a job with a replace key (ADR-0049): the
// shared insert of one job plus its replace_key, ON CONFLICT on
// jobs_replace_pending_idx, the key's one PENDING never-started job of the
// topic. On a conflict the job's args and run_at change in place as the
// mode says, with replaced + 1 (the identity guard's one exception,
// which the schema records in job_replacements); keep_first changes
// nothing and answers no row. The statement answers the id of the job that
// stands for the submit: the minted id ($1) when it inserted, the pending
// job's when it replaced. A replacement that makes the job due now wakes
// the gateways as an insert does (the insert trigger sees inserted rows
// only).
//
// A claim racing the submit either took the job first (the conflicting
// row is RUNNING by the time the insert rechecks the index, so the submit
// inserts a new job) or waits for the submit's row lock and then claims
// the job with the new args (SKIP LOCKED skips it until the submit
// commits): never both, never half.
var replaceSQL = strings.NewReplacer("$KEY", fmt.Sprintf("$%d", replaceParams+1), "$MODE", fmt.Sprintf("$%d", replaceParams+2)).Replace(`
WITH up AS (` + strings.TrimSuffix(insertInto, ")") + `, replace_key)` + insertValues + `, r.rkey
FROM ` + scalarSource + `, (SELECT $KEY::text AS rkey) AS r
ON CONFLICT (topic, replace_key)
    WHERE replace_key IS NOT NULL AND status = 'PENDING' AND attempts = 0 AND started_at IS NULL
DO UPDATE SET
    args = EXCLUDED.args,
    next_run_at = CASE WHEN $MODE::text = 'keep_earlier_run_at'
                       THEN LEAST(jobs.next_run_at, EXCLUDED.next_run_at)
                       ELSE EXCLUDED.next_run_at END,
    replaced = jobs.replaced + 1
    WHERE $MODE::text <> 'keep_first'
RETURNING id, topic, next_run_at
)
SELECT up.id::text || CASE WHEN up.id <> $1::uuid AND up.next_run_at <= now()
                           THEN left(pg_notify('pulse_jobs_ready', up.topic)::text, 0) ELSE '' END
FROM up`)

// replaceParams is how many parameters the shared one-job row source
// takes: the replace key and mode follow them.
var replaceParams = len(insertOneParams(pulsetype.NewJob{}))

// replaceHolderSQL finds the key's pending, never-started job.
const replaceHolderSQL = `
SELECT id::text FROM jobs
WHERE topic = $1 AND replace_key = $2
  AND status = 'PENDING' AND attempts = 0 AND started_at IS NULL`

// replaceOne submits one job with a replace key through q: it inserts
// the job, replaces the key's pending job, or (keep_first) resolves to it.
// A keep_first whose holder started between the statement and the lookup
// runs again, and then inserts.
func replaceOne(ctx context.Context, q Queryer, job pulsetype.NewJob) (pulsetype.Inserted, error) {
	mode := job.ReplaceMode
	if mode == "" {
		mode = pulsetype.ReplaceArgsAndRunAt
	}
	params := append(insertOneParams(job), job.ReplaceKey, string(mode))
	for range insertOneTries {
		ids, err := q.QueryText(ctx, replaceSQL, params...)
		if err != nil {
			return pulsetype.Inserted{}, rowError(job, err)
		}
		if len(ids) == 1 {
			id, err := uuid.Parse(ids[0])
			if err != nil {
				return pulsetype.Inserted{}, fmt.Errorf("replace job: %w", err)
			}
			if id == job.ID {
				return pulsetype.Inserted{ID: id}, nil
			}
			return pulsetype.Inserted{ID: id, Duplicate: true, Replaced: true}, nil
		}
		if id, ok, err := holder(ctx, q, replaceHolderSQL, job.Topic, job.ReplaceKey); err != nil || ok {
			return pulsetype.Inserted{ID: id, Duplicate: ok}, err
		}
		// The holder started after the statement: the key is free.
	}
	return pulsetype.Inserted{}, apierr.Unavailable("submit job: the replace key's pending job kept changing; retry", nil)
}

// hasReplace reports whether any job carries a replace key.
func hasReplace(jobs []pulsetype.NewJob) bool {
	for i := range jobs {
		if jobs[i].ReplaceKey != "" {
			return true
		}
	}
	return false
}

// insertWithReplace is Insert for a batch holding a job with a replace
// key: every job in order, in one transaction, each by InsertOne's
// statements, so the batch is still all or nothing and a later job of the
// batch sees what an earlier one did to its key.
func (s *Store) insertWithReplace(ctx context.Context, jobs []pulsetype.NewJob) ([]pulsetype.Inserted, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, interpretError("insert jobs", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	q := txQueryer{tx}
	out := make([]pulsetype.Inserted, len(jobs))
	for i := range jobs {
		if out[i], err = InsertOne(ctx, q, jobs[i]); err != nil {
			return nil, &MemberError{Index: i, Err: err}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, interpretError("insert jobs", err)
	}
	return out, nil
}

// replaceEach answers the jobs of a coalesced batch that carry a replace
// key, each on its own statement (a job's outcome is its caller's alone),
// in batch order.
func (s *Store) replaceEach(ctx context.Context, jobs []pulsetype.NewJob, at []int, out []pulsetype.Inserted, errs []error) []error {
	q := poolQueryer{s}
	for _, i := range at {
		res, err := replaceOne(ctx, q, jobs[i])
		if err != nil {
			if errs == nil {
				errs = make([]error, len(jobs))
			}
			errs[i] = err
			continue
		}
		out[i] = res
	}
	return errs
}

// txQueryer runs InsertOne's statements on a pgx transaction.
type txQueryer struct{ tx pgx.Tx }

func (q txQueryer) QueryText(ctx context.Context, sql string, args ...any) ([]string, error) {
	rows, err := q.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// poolQueryer runs InsertOne's statements on the store's pool, each its
// own transaction.
type poolQueryer struct{ s *Store }

func (q poolQueryer) QueryText(ctx context.Context, sql string, args ...any) ([]string, error) {
	rows, err := q.s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
