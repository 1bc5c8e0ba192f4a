package jobstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// NewJob is a validated job ready to insert. The id is minted by the caller
// (uuid v7 for submits, uuid v5 of schedule+occurrence for schedule fires)
// so a retried insert of the same id is a no-op.
type NewJob struct {
	ID             uuid.UUID
	Topic          string
	Args           []byte // a JSON object
	Priority       int16
	MaxAttempts    int32
	RunAt          time.Time // zero: now
	IdempotencyKey string    // empty: none
	ScheduleID     *uuid.UUID
	TraceParent    string
	TraceState     string
}

// Inserted is the outcome of one NewJob: the id of the job that now stands
// for it, and whether that job existed already (same id, or same live
// idempotency key).
type Inserted struct {
	ID        uuid.UUID
	Duplicate bool
}

// insertSQL inserts a whole batch in one statement from parallel arrays. ON
// CONFLICT DO NOTHING covers both unique rules: the primary key (a
// re-fired schedule occurrence) and the live idempotency key. The statement
// trigger then sends one NOTIFY per distinct ready topic.
const insertSQL = insertRowsSQL + `
ON CONFLICT DO NOTHING
RETURNING id`

// insertRowsSQL is the batch insert without conflict handling: the fast
// path of a batch that can conflict only on a repeated job id (Insert).
const insertRowsSQL = `
INSERT INTO jobs (id, topic, args, priority, max_attempts, next_run_at,
                  idempotency_key, schedule_id, traceparent, tracestate)
SELECT id, topic, args::jsonb, priority, max_attempts, COALESCE(run_at, now()),
       NULLIF(idem, ''), schedule_id, NULLIF(tp, ''), NULLIF(ts, '')
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::int[],
            $6::timestamptz[], $7::text[], $8::uuid[], $9::text[], $10::text[])
     AS t(id, topic, args, priority, max_attempts, run_at, idem, schedule_id, tp, ts)`

// existingByKeySQL finds the live job holding each idempotency key.
const existingByKeySQL = `
SELECT idempotency_key, id FROM jobs
WHERE idempotency_key = ANY($1::text[]) AND status IN ('PENDING', 'RUNNING', 'RETRYING')`

// Insert writes jobs all or nothing, in one statement on the happy path.
// A job whose id already exists, or whose idempotency key is held by a live
// job, is reported as a duplicate of the existing job.
//
// When Postgres refuses the batch's data nothing is written and the error
// is a *MemberError naming the first job it refuses, with that job's own
// error (InvalidArgument naming its field when it is the job's data). The
// job is found by splitting the batch (Isolate) inside a transaction that
// is then rolled back, so finding it writes nothing either.
func (s *Store) Insert(ctx context.Context, jobs []NewJob) ([]Inserted, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	fresh, err := s.insertRows(ctx, jobs)
	if err != nil {
		return nil, s.refusal(ctx, jobs, err)
	}
	out, errs := s.resolve(ctx, jobs, fresh, nil)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// InsertEach writes jobs as Insert does but answers each job on its own:
// the jobs of a batch are independent callers' (control-api's coalesced
// submits). The batch is one statement on the happy path. When Postgres
// refuses its data, the batch is split (Isolate): every job Postgres
// accepts is inserted, and each job it refuses fails alone with its own
// error, InvalidArgument naming its field (topic, args, idempotency_key,
// run_at, ...) when it is the job's data. errs is nil when every job
// succeeded; otherwise errs[i] is job i's error and out[i] is zero.
func (s *Store) InsertEach(ctx context.Context, jobs []NewJob) (out []Inserted, errs []error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	// insertRows is all or nothing per call: one INSERT statement (or, on
	// the plain path, a plain INSERT that changed nothing and then one
	// INSERT ... ON CONFLICT). The idempotency-key lookup that follows is a
	// read, outside what is split: splitting after it committed rows would
	// report a job inserted by the first attempt as its own duplicate.
	fresh, errs := Isolate(jobs, func(batch []NewJob) ([]bool, error) {
		return s.insertRows(ctx, batch)
	})
	for i, err := range errs {
		if err != nil {
			errs[i] = rowError(jobs[i], err)
		}
	}
	return s.resolve(ctx, jobs, fresh, errs)
}

// MemberError is Insert's error when Postgres refused one job of the
// batch: Index is its place in the jobs given to Insert, Err its own
// error. Nothing of the batch was written.
type MemberError struct {
	Index int
	Err   error
}

func (e *MemberError) Error() string { return fmt.Sprintf("jobs[%d]: %v", e.Index, e.Err) }
func (e *MemberError) Unwrap() error { return e.Err }

// insertParams are the statement's parallel arrays.
func insertParams(jobs []NewJob) []any {
	n := len(jobs)
	ids := make([][16]byte, n)
	topics := make([]string, n)
	args := make([]string, n)
	prios := make([]int16, n)
	maxes := make([]int32, n)
	runAts := make([]*time.Time, n)
	keys := make([]string, n)
	scheds := make([]*uuid.UUID, n)
	tps := make([]string, n)
	tss := make([]string, n)
	for i := range jobs {
		j := &jobs[i]
		ids[i], topics[i], args[i] = j.ID, j.Topic, string(j.Args)
		prios[i], maxes[i], keys[i] = j.Priority, j.MaxAttempts, j.IdempotencyKey
		if !j.RunAt.IsZero() {
			t := j.RunAt
			runAts[i] = &t
		}
		scheds[i], tps[i], tss[i] = j.ScheduleID, j.TraceParent, j.TraceState
	}
	return []any{ids, topics, args, prios, maxes, runAts, keys, scheds, tps, tss}
}

// insertRows runs the batch's write and reports, per job, whether this
// call inserted it (false: its id or live idempotency key existed). It is
// all or nothing: on error nothing was written. Errors are Postgres's own,
// uninterpreted, so Isolate can tell a data error from an outage.
func (s *Store) insertRows(ctx context.Context, jobs []NewJob) ([]bool, error) {
	n := len(jobs)
	params := insertParams(jobs)
	fresh := make([]bool, n)

	// Without idempotency keys or schedule ids, a batch can conflict only
	// on a repeated job id, and callers mint a fresh one (uuid v7) for every
	// submit. Such a batch goes in as a plain INSERT, skipping ON CONFLICT's
	// speculative insertion (a pre-check of the unique indexes and an extra
	// WAL record per row: measured, ~14 % of the insert's cost). If an id
	// does repeat, that statement fails as a whole and changes nothing, and
	// the batch is inserted the ordinary way below, so a repeated id is still
	// a duplicate, never an error.
	if plainBatch(jobs) {
		tag, err := s.pool.Exec(ctx, insertRowsSQL, params...)
		switch {
		case err == nil && tag.RowsAffected() == int64(n):
			for i := range fresh {
				fresh[i] = true
			}
			return fresh, nil
		case err == nil:
			return nil, fmt.Errorf("insert jobs: inserted %d of %d rows without a conflict", tag.RowsAffected(), n)
		case !isPrimaryKeyViolation(err):
			return nil, err
		}
	}

	rows, err := s.pool.Query(ctx, insertSQL, params...)
	if err != nil {
		return nil, err
	}
	inserted := make(map[uuid.UUID]bool, n)
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(uuidDest(&id)); err != nil {
			rows.Close()
			return nil, err
		}
		inserted[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range jobs {
		fresh[i] = inserted[jobs[i].ID]
	}
	return fresh, nil
}

// resolve answers the jobs insertRows wrote or found: a job not inserted is
// a duplicate, and one that lost its idempotency key to a live job (an
// earlier submit, or an earlier entry of this same batch) resolves to that
// job's id. Jobs with an error in errs keep it; errs may be nil.
func (s *Store) resolve(ctx context.Context, jobs []NewJob, fresh []bool, errs []error) ([]Inserted, []error) {
	n := len(jobs)
	failed := func(i int) bool { return errs != nil && errs[i] != nil }
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, n)
		}
		errs[i] = err
	}
	out := make([]Inserted, n)
	var missingKeys []string
	for i := range jobs {
		if failed(i) {
			continue
		}
		out[i].ID = jobs[i].ID
		if fresh[i] {
			continue
		}
		out[i].Duplicate = true
		if jobs[i].IdempotencyKey != "" {
			missingKeys = append(missingKeys, jobs[i].IdempotencyKey)
		}
	}
	if len(missingKeys) == 0 {
		return out, errs
	}
	needsKey := func(i int) bool { return !failed(i) && out[i].Duplicate && jobs[i].IdempotencyKey != "" }
	holders, err := s.keyHolders(ctx, missingKeys)
	if err != nil {
		for i := range jobs {
			if needsKey(i) {
				out[i] = Inserted{}
				fail(i, err)
			}
		}
		return out, errs
	}
	var retry []int
	for i := range jobs {
		if !needsKey(i) {
			continue
		}
		if id, ok := holders[jobs[i].IdempotencyKey]; ok {
			out[i].ID = id
		} else {
			// The holder finished between our insert and our lookup: the key
			// is free again, so this job must be inserted after all.
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		again := make([]NewJob, len(retry))
		for k, i := range retry {
			again[k] = jobs[i]
		}
		res, rerrs := s.InsertEach(ctx, again)
		for k, i := range retry {
			out[i] = res[k]
			if rerrs != nil && rerrs[k] != nil {
				fail(i, rerrs[k])
			}
		}
	}
	return out, errs
}

// keyHolders finds the live job holding each idempotency key.
func (s *Store) keyHolders(ctx context.Context, keys []string) (map[string]uuid.UUID, error) {
	holders := make(map[string]uuid.UUID, len(keys))
	rows, err := s.pool.Query(ctx, existingByKeySQL, keys)
	if err != nil {
		return nil, interpretError("resolve idempotency keys", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var id uuid.UUID
		if err := rows.Scan(&key, uuidDest(&id)); err != nil {
			return nil, interpretError("resolve idempotency keys", err)
		}
		holders[key] = id
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("resolve idempotency keys", err)
	}
	return holders, nil
}

// refusal explains why Insert's batch statement failed. A data error is
// pinned on the first job Postgres refuses (locate); anything else is the
// database's, returned as it is.
func (s *Store) refusal(ctx context.Context, jobs []NewJob, err error) error {
	if !IsDataError(err) {
		return interpretError("insert jobs", err)
	}
	at, cause := 0, err
	if len(jobs) > 1 {
		var ok bool
		if at, cause, ok = s.locate(ctx, jobs); !ok {
			return interpretError("insert jobs", err)
		}
	}
	return &MemberError{Index: at, Err: rowError(jobs[at], cause)}
}

// locate finds the first job of a batch that Postgres refuses, by
// splitting the batch (Isolate) inside one transaction, each part under
// its own savepoint, and rolling the transaction back: it writes nothing.
// ok is false when no job is refused on its own (the failure was the
// database's after all).
func (s *Store) locate(ctx context.Context, jobs []NewJob) (at int, err error, ok bool) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, nil, false
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // always rolled back
	_, errs := Isolate(jobs, func(batch []NewJob) ([]struct{}, error) {
		sp, err := tx.Begin(ctx) // SAVEPOINT
		if err != nil {
			return nil, err
		}
		if _, err := sp.Exec(ctx, insertSQL, insertParams(batch)...); err != nil {
			_ = sp.Rollback(ctx) // ROLLBACK TO SAVEPOINT: the transaction goes on
			return nil, err
		}
		return make([]struct{}, len(batch)), sp.Commit(ctx) // RELEASE SAVEPOINT
	})
	for i, e := range errs {
		if e != nil && IsDataError(e) {
			return i, e, true
		}
	}
	return 0, nil, false
}

// rowError is one job's error after its batch was split: when Postgres
// refused a value it cannot store, the field is found by checking the
// job's values with package storable (the SQLSTATE does not say which
// column); a CHECK violation names its constraint's field (interpretError).
func rowError(job NewJob, err error) error {
	var pgErr *pgconn.PgError
	if IsDataError(err) && errors.As(err, &pgErr) && (unstorable(pgErr.Code) || pgErr.Code == "22P02") {
		if ferr := storableRow(job); ferr != nil {
			return withCause(ferr, pgErr)
		}
	}
	return interpretError("insert jobs", err)
}

// storableRow checks a job's values as control-api checks them at the
// edge, returning the first it finds Postgres cannot store.
func storableRow(job NewJob) error {
	if err := storable.Text("topic", job.Topic); err != nil {
		return err
	}
	if err := storable.JSON("args", job.Args); err != nil {
		return err
	}
	if err := storable.Text("idempotency_key", job.IdempotencyKey); err != nil {
		return err
	}
	if !job.RunAt.IsZero() {
		if err := storable.Time("run_at", job.RunAt); err != nil {
			return err
		}
	}
	if err := storable.Text("traceparent", job.TraceParent); err != nil {
		return err
	}
	return storable.Text("tracestate", job.TraceState)
}

// plainBatch reports whether jobs can conflict only on their ids: none
// carries an idempotency key or a schedule id (a schedule fire's id is
// derived from its occurrence and is meant to repeat).
func plainBatch(jobs []NewJob) bool {
	for i := range jobs {
		if jobs[i].IdempotencyKey != "" || jobs[i].ScheduleID != nil {
			return false
		}
	}
	return true
}

// isPrimaryKeyViolation: the statement failed because a job id exists.
func isPrimaryKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "jobs_pkey"
}
