package jobstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Queryer runs one statement in a caller's transaction and returns the
// first column of every row it answers, as text. It is what InsertOne
// needs of a pgx.Tx or a *sql.Tx (package pulsetx adapts both), so a job
// can be enqueued inside an application's own transaction with the same
// statements, and the same schema rules, as control-api's submits.
type Queryer interface {
	QueryText(ctx context.Context, sql string, args ...any) ([]string, error)
}

// scalarSource is one job as scalar parameters, for any driver: the row
// source InsertOne runs the shared insert over (see arraySource).
const scalarSource = `
(SELECT $1::uuid AS id, $2::text AS topic, $3::text AS args, $4::smallint AS priority,
        $5::int AS max_attempts, $6::timestamptz AS run_at, $7::text AS idem,
        NULL::uuid AS schedule_id, $8::text AS tp, $9::text AS ts,
        $10::bigint AS tmo, $11::bigint AS uniq,
        $12::bigint AS rbase, $13::bigint AS rmax, $14::bigint AS rfixed, $15::text AS tags,
        $16::text AS ratekey, $17::text AS ckey, $18::text AS skey, 1::bigint AS ord) AS t`

// insertOneSQL inserts one job; ON CONFLICT DO NOTHING covers its id and
// a live idempotency key, as insertSQL does for a batch.
const insertOneSQL = insertInto + insertValues + `
FROM ` + scalarSource + `
ON CONFLICT DO NOTHING
RETURNING id::text`

// insertOneUniqueSQL is uniqueInsert for one job.
var insertOneUniqueSQL = fmt.Sprintf(uniqueInsert, scalarSource, "id::text")

// uniqueHolderSQL finds the job holding the key of one topic and args while
// its period lasts.
const uniqueHolderSQL = `
SELECT job_id::text FROM job_uniques
WHERE unique_key = md5($1::text || chr(10) || $2::text::jsonb::text)::uuid AND expires_at > now()`

// keyHolderSQL finds the live job holding one idempotency key.
const keyHolderSQL = `
SELECT id::text FROM jobs
WHERE idempotency_key = $1 AND status IN ('PENDING', 'RUNNING', 'RETRYING')`

// insertOneTries bounds InsertOne's loop when a duplicate's holder is gone
// by the time it is looked up (it finished, its period ended).
const insertOneTries = 3

// InsertOne inserts job through q, inside the caller's transaction: the
// job exists if and only if that transaction commits, and the insert
// trigger's NOTIFY reaches the gateways at that commit. A duplicate (same
// live idempotency key, or same topic and args within a unique period)
// answers the job holding it, as Insert does. The job must have been
// validated (jobspec), as control-api does before Insert.
//
// Errors are typed as Insert's (InvalidArgument naming the field when
// Postgres refuses the job's data). A statement that fails leaves the
// caller's transaction aborted, as any failed statement does: roll it
// back. InsertOne never retries a failed statement for that reason; a
// unique job that loses its idempotency key to a transaction committing
// during its insert fails Unavailable.
func InsertOne(ctx context.Context, q Queryer, job pulsetype.NewJob) (pulsetype.Inserted, error) {
	if job.ReplaceKey != "" {
		return replaceOne(ctx, q, job)
	}
	stmt := insertOneSQL
	if job.UniqueFor > 0 {
		stmt = insertOneUniqueSQL
	}
	params := insertOneParams(job)
	for range insertOneTries {
		ids, err := q.QueryText(ctx, stmt, params...)
		if err != nil {
			return pulsetype.Inserted{}, rowError(job, err)
		}
		if len(ids) == 1 {
			return pulsetype.Inserted{ID: job.ID}, nil
		}
		if job.UniqueFor > 0 {
			if id, ok, err := holder(ctx, q, uniqueHolderSQL, job.Topic, string(job.Args)); err != nil || ok {
				return pulsetype.Inserted{ID: id, Duplicate: ok}, err
			}
		}
		if job.IdempotencyKey != "" {
			if id, ok, err := holder(ctx, q, keyHolderSQL, job.IdempotencyKey); err != nil || ok {
				return pulsetype.Inserted{ID: id, Duplicate: ok}, err
			}
		}
		if job.UniqueFor == 0 && job.IdempotencyKey == "" {
			// Only its id can have conflicted: that job is this one.
			return pulsetype.Inserted{ID: job.ID, Duplicate: true}, nil
		}
		// The holder is gone: the job may be inserted after all.
	}
	return pulsetype.Inserted{}, apierr.Unavailable("insert job: its duplicate's holder kept changing; retry", nil)
}

// insertOneParams are scalarSource's parameters for job.
func insertOneParams(job pulsetype.NewJob) []any {
	var runAt any
	if !job.RunAt.IsZero() {
		runAt = job.RunAt
	}
	return []any{job.ID.String(), job.Topic, string(job.Args), job.Priority, job.MaxAttempts, runAt,
		job.IdempotencyKey, job.TraceParent, job.TraceState, job.Timeout.Microseconds(), job.UniqueFor.Microseconds(),
		job.Retry.Base.Microseconds(), job.Retry.Max.Microseconds(), job.Retry.Fixed.Microseconds(), strings.Join(job.Tags, ","),
		job.RateKey, job.ConcurrencyKey, job.SequenceKey}
}

// holder runs a holder lookup: the id it finds, if any.
func holder(ctx context.Context, q Queryer, sql string, args ...any) (uuid.UUID, bool, error) {
	ids, err := q.QueryText(ctx, sql, args...)
	if err != nil {
		return uuid.Nil, false, interpretError("resolve duplicate", err)
	}
	if len(ids) == 0 {
		return uuid.Nil, false, nil
	}
	id, err := uuid.Parse(ids[0])
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("resolve duplicate: %w", err)
	}
	return id, true, nil
}
