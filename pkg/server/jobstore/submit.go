package jobstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// insertSQL inserts a whole batch in one statement from parallel arrays. ON
// CONFLICT DO NOTHING covers both unique rules: the primary key (a
// re-fired schedule occurrence) and the live idempotency key. The statement
// trigger then sends one NOTIFY per distinct ready topic.
const insertSQL = insertRowsSQL + `
ON CONFLICT DO NOTHING
RETURNING id`

// insertInto and insertValues are the insert every statement here shares:
// the columns, and the values made from the row source t (the parallel
// arrays below, or one job's scalars in InsertOne).
const insertInto = `
INSERT INTO jobs (id, topic, args, priority, max_attempts, next_run_at,
                  idempotency_key, schedule_id, traceparent, tracestate, timeout,
                  retry_base, retry_max, retry_fixed, tags, rate_key,
                  concurrency_key, sequence_key)`

const insertValues = `
SELECT id, topic, args::jsonb, priority, max_attempts, COALESCE(run_at, now()),
       NULLIF(idem, ''), schedule_id, NULLIF(tp, ''), NULLIF(ts, ''),
       NULLIF(tmo, 0) * interval '1 microsecond',
       NULLIF(rbase, 0) * interval '1 microsecond', NULLIF(rmax, 0) * interval '1 microsecond',
       NULLIF(rfixed, 0) * interval '1 microsecond',
       string_to_array(NULLIF(tags, ''), ','),
       ` + rateKeyValue + `,
       NULLIF(ckey, ''), NULLIF(skey, '')`

// rateKeyValue is a new job's rate_key (ADR-0051): the one the producer
// gave (ratekey), or else, when its topic's rate limit takes the key from an
// args field ('args:<field>'), that field's text, extracted here so the
// claim never parses args. A key longer than pulsetype.MaxRateKeyBytes is
// stored as its md5; a missing, null or empty field gives no key. Whether
// any topic has such a limit is asked once per statement (an InitPlan on
// topic_limits_args_key_idx, migration 00021); only then is each job's
// topic looked up, so while none has, a job costs no read of topic_limits.
const rateKeyValue = `COALESCE(NULLIF(ratekey, ''), CASE WHEN EXISTS (
           SELECT FROM topic_limits WHERE left(rate_key, 5) = 'args:') THEN (
           SELECT CASE WHEN octet_length(x.v) <= 255 THEN x.v ELSE 'md5:' || md5(x.v) END
           FROM (SELECT args::jsonb ->> substr(l.rate_key, 6) AS v
                 FROM topic_limits AS l WHERE l.topic = t.topic AND left(l.rate_key, 5) = 'args:') AS x
           WHERE x.v <> '') END)`

// arraySource is a batch as parallel arrays, one row per job; tmo, uniq
// and the retry policy's rbase, rmax and rfixed are microseconds (0:
// none); tags are the job's tags joined by commas (empty: none; a tag has
// no comma, pulsetype.TagPattern); ratekey is the job's rate key (empty: none).
const arraySource = `
unnest($1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::int[],
       $6::timestamptz[], $7::text[], $8::uuid[], $9::text[], $10::text[],
       $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], $16::text[],
       $17::text[], $18::text[], $19::text[])
     WITH ORDINALITY AS t(id, topic, args, priority, max_attempts, run_at, idem, schedule_id, tp, ts, tmo, uniq,
                          rbase, rmax, rfixed, tags, ratekey, ckey, skey, ord)`

// insertRowsSQL is the batch insert without conflict handling: the fast
// path of a batch that can conflict only on a repeated job id (Insert).
const insertRowsSQL = insertInto + insertValues + `
FROM ` + arraySource

// uniqueInsert is the insert of a batch holding a unique job (UniqueFor),
// over a row source t that has a column ord (the job's place in the batch),
// as one statement:
//
//   - keyed gives each unique job its key: md5 of topic, a newline and the
//     args' canonical jsonb text, as a uuid (migration 00008);
//   - eligible keeps, per key, the batch's first unique job that may claim
//     it: one whose idempotency key no live job holds (as of the
//     statement's snapshot) and no earlier job of the batch carries, since
//     such a job is not inserted and must not hold a key;
//   - claimed takes each key in job_uniques, or replaces the holder whose
//     period has ended. The primary key serializes racing submits: a second
//     claim of a key waits for the first to commit and then finds it held;
//   - the jobs insert takes every job that is not unique and every unique
//     job that claimed its key. A unique job that did not is a duplicate
//     (resolve finds the holder).
//
// job_uniques.job_id references jobs, checked when the statement ends: if
// a claimed job was not inserted after all (an idempotency key taken by a
// transaction that committed after the statement's snapshot), the whole
// statement fails with job_uniques_job_id_fkey, writing nothing, and
// insertRows runs it again.
const uniqueInsert = `
WITH keyed AS (
    SELECT t.*, CASE WHEN t.uniq > 0
                     THEN md5(t.topic || chr(10) || t.args::jsonb::text)::uuid END AS ukey
    FROM %s
), eligible AS (
    SELECT DISTINCT ON (k.ukey) k.id, k.ukey, k.uniq
    FROM (SELECT keyed.*, row_number() OVER (PARTITION BY NULLIF(keyed.idem, '') ORDER BY keyed.ord) AS idem_rank
          FROM keyed) AS k
    WHERE k.ukey IS NOT NULL
      AND (k.idem = '' OR (k.idem_rank = 1 AND NOT EXISTS (
            SELECT 1 FROM jobs j
            WHERE j.idempotency_key = k.idem AND j.status IN ('PENDING', 'RUNNING', 'RETRYING'))))
    ORDER BY k.ukey, k.ord
), claimed AS (
    INSERT INTO job_uniques AS u (unique_key, job_id, since, expires_at)
    SELECT ukey, id, now(), now() + uniq * interval '1 microsecond' FROM eligible
    ON CONFLICT (unique_key) DO UPDATE
        SET job_id = EXCLUDED.job_id, since = EXCLUDED.since, expires_at = EXCLUDED.expires_at
        WHERE u.expires_at <= now()
    RETURNING u.job_id
)` + insertInto + insertValues + `
FROM keyed AS t
WHERE t.ukey IS NULL OR t.id IN (SELECT job_id FROM claimed)
ON CONFLICT DO NOTHING
RETURNING %s`

// insertUniqueSQL is uniqueInsert over the parallel arrays.
var insertUniqueSQL = fmt.Sprintf(uniqueInsert, arraySource, "id")

// uniqueHoldersSQL finds, for each (topic, args) pair, the job holding its
// unique key while its period lasts.
const uniqueHoldersSQL = `
SELECT t.ord, u.job_id
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(topic, args, ord)
JOIN job_uniques u ON u.unique_key = md5(t.topic || chr(10) || t.args::jsonb::text)::uuid
WHERE u.expires_at > now()`

// uniqueRaceRetries bounds how often insertRows runs a unique batch again
// after job_uniques_job_id_fkey: each run takes a fresh snapshot, which
// sees the idempotency key the last one lost to.
const uniqueRaceRetries = 3

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
func (s *Store) Insert(ctx context.Context, jobs []pulsetype.NewJob) ([]pulsetype.Inserted, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	if hasReplace(jobs) {
		return s.insertWithReplace(ctx, jobs)
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
func (s *Store) InsertEach(ctx context.Context, jobs []pulsetype.NewJob) (out []pulsetype.Inserted, errs []error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	if hasReplace(jobs) {
		// The jobs with a replace key go one by one (replaceEach), the
		// others as a batch, as they would without them.
		var plain, replacing []int
		for i := range jobs {
			if jobs[i].ReplaceKey != "" {
				replacing = append(replacing, i)
			} else {
				plain = append(plain, i)
			}
		}
		out = make([]pulsetype.Inserted, len(jobs))
		if len(plain) > 0 {
			batch := make([]pulsetype.NewJob, len(plain))
			for k, i := range plain {
				batch[k] = jobs[i]
			}
			res, berrs := s.InsertEach(ctx, batch)
			for k, i := range plain {
				out[i] = res[k]
				if berrs != nil && berrs[k] != nil {
					if errs == nil {
						errs = make([]error, len(jobs))
					}
					errs[i] = berrs[k]
				}
			}
		}
		return out, s.replaceEach(ctx, jobs, replacing, out, errs)
	}
	// insertRows is all or nothing per call: one INSERT statement (or, on
	// the plain path, a plain INSERT that changed nothing and then one
	// INSERT ... ON CONFLICT). The idempotency-key lookup that follows is a
	// read, outside what is split: splitting after it committed rows would
	// report a job inserted by the first attempt as its own duplicate.
	fresh, errs := Isolate(jobs, func(batch []pulsetype.NewJob) ([]bool, error) {
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
func insertParams(jobs []pulsetype.NewJob) []any {
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
	tmos := make([]int64, n)
	uniqs := make([]int64, n)
	rbases := make([]int64, n)
	rmaxes := make([]int64, n)
	rfixeds := make([]int64, n)
	tags := make([]string, n)
	rkeys := make([]string, n)
	ckeys := make([]string, n)
	skeys := make([]string, n)
	for i := range jobs {
		j := &jobs[i]
		ids[i], topics[i], args[i] = j.ID, j.Topic, string(j.Args)
		prios[i], maxes[i], keys[i] = j.Priority, j.MaxAttempts, j.IdempotencyKey
		if !j.RunAt.IsZero() {
			t := j.RunAt
			runAts[i] = &t
		}
		scheds[i], tps[i], tss[i] = j.ScheduleID, j.TraceParent, j.TraceState
		tmos[i], uniqs[i] = j.Timeout.Microseconds(), j.UniqueFor.Microseconds()
		rbases[i], rmaxes[i], rfixeds[i] = j.Retry.Base.Microseconds(), j.Retry.Max.Microseconds(), j.Retry.Fixed.Microseconds()
		tags[i] = strings.Join(j.Tags, ",")
		rkeys[i] = j.RateKey
		ckeys[i], skeys[i] = j.ConcurrencyKey, j.SequenceKey
	}
	return []any{ids, topics, args, prios, maxes, runAts, keys, scheds, tps, tss, tmos, uniqs, rbases, rmaxes, rfixeds, tags, rkeys, ckeys, skeys}
}

// insertRows runs the batch's write and reports, per job, whether this
// call inserted it (false: its id or live idempotency key existed). It is
// all or nothing: on error nothing was written. Errors are Postgres's own,
// uninterpreted, so Isolate can tell a data error from an outage.
func (s *Store) insertRows(ctx context.Context, jobs []pulsetype.NewJob) ([]bool, error) {
	n := len(jobs)
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
		tag, err := s.insertWakingAfterCommit(ctx, insertRowsSQL, insertParams(jobs), nil)
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

	stmt := insertStatement(jobs)
	params := insertParams(inKeyOrder(jobs))
	for try := 1; ; try++ {
		inserted, err := s.insertReturning(ctx, stmt, params)
		if isUniqueRace(err) && try < uniqueRaceRetries {
			continue
		}
		if err != nil {
			return nil, err
		}
		for i := range jobs {
			fresh[i] = inserted[jobs[i].ID]
		}
		return fresh, nil
	}
}

// insertReturning runs an insert statement that returns the ids it
// inserted, with the pinned plan settings (pinnedPlanSQL).
func (s *Store) insertReturning(ctx context.Context, stmt string, params []any) (map[uuid.UUID]bool, error) {
	inserted := make(map[uuid.UUID]bool)
	_, err := s.insertWakingAfterCommit(ctx, stmt, params, func(rows pgx.Rows) error {
		var id uuid.UUID
		if err := rows.Scan(uuidDest(&id)); err != nil {
			return err
		}
		inserted[id] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return inserted, nil
}

// readyAfterCommitSQL begins an insert's transaction: the pinned plan
// settings (pinnedPlanSQL), then the two settings with which the insert
// trigger (migration 00023, ADR-0061) collects its pulse_jobs_ready
// payloads in pulse.ready_payloads for after the commit instead of
// notifying at it. The payloads start empty in every such transaction.
const readyAfterCommitSQL = pinnedPlanSQL + `, set_config('pulse.ready_after_commit', 'on', true), set_config('pulse.ready_payloads', '', false)`

// notifyReadySQL sends the payloads the insert trigger collected, in a
// transaction of its own after the insert's commit. Postgres folds a
// payload repeated within one transaction into one notification.
const notifyReadySQL = `SELECT count(pg_notify('` + ReadyChannel + `', p))
FROM unnest(string_to_array(NULLIF(current_setting('pulse.ready_payloads', true), ''), ',')) AS p`

// insertWakingAfterCommit runs an insert statement (with scan for its
// rows, or nil) in a transaction of its own and sends the gateways' wake
// after its commit, in one round trip: BEGIN, readyAfterCommitSQL, the
// statement, COMMIT, notifyReadySQL, pipelined on one connection.
//
// Postgres serializes the commits of all transactions that sent a NOTIFY,
// each holding one cluster-wide lock until its commit record is flushed;
// an insert that notified at its commit therefore never shared a WAL
// flush with another, and under load waited in line for each one before
// it (ADR-0061). The transaction that only notifies writes no WAL of its
// own, so it does not wait for a flush. The wake reaches the gateways
// when it did before, after the commit; it is only sent from the next
// statement on the same backend. A schema older than migration 00023
// ignores the settings and notifies at the commit, as it always did.
//
// Errors are Postgres's own, uninterpreted (Isolate tells a data error
// from an outage by them). A refused statement leaves the explicit
// transaction aborted, which is rolled back here, so the connection goes
// back to the pool rather than being closed by it. Once the COMMIT has
// succeeded the jobs are in, and a failure of the wake (Postgres's NOTIFY
// queue full, because a listener stopped reading) is not the insert's:
// it goes to the store's LogWakeErrors, and the gateways find the jobs at
// their next poll. Before ADR-0061 that failure failed the INSERT's
// commit instead.
func (s *Store) insertWakingAfterCommit(ctx context.Context, stmt string, params []any, scan func(pgx.Rows) error) (pgconn.CommandTag, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(readyAfterCommitSQL)
	b.Queue(stmt, params...)
	b.Queue("COMMIT")
	b.Queue(notifyReadySQL)
	br := conn.SendBatch(ctx, b)
	tag, committed, err := readInsertBatch(br, scan)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if committed {
		if err != nil && s.onWakeError != nil {
			s.onWakeError(err)
		}
		return tag, nil
	}
	if err != nil && !conn.Conn().IsClosed() && conn.Conn().PgConn().TxStatus() != 'I' {
		// The statement was refused inside BEGIN: end that transaction
		// (it writes nothing) so the pool keeps the connection.
		if _, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			conn.Conn().PgConn().Close(context.WithoutCancel(ctx))
		}
	}
	return tag, err
}

// readInsertBatch reads insertWakingAfterCommit's results in order: the
// insert's command tag, whether its COMMIT succeeded, and the first error.
func readInsertBatch(br pgx.BatchResults, scan func(pgx.Rows) error) (tag pgconn.CommandTag, committed bool, err error) {
	for range 2 { // BEGIN, the settings
		if _, err := br.Exec(); err != nil {
			return tag, false, err
		}
	}
	if scan == nil {
		if tag, err = br.Exec(); err != nil {
			return tag, false, err
		}
	} else {
		rows, err := br.Query()
		if err != nil {
			return tag, false, err
		}
		for rows.Next() {
			if err := scan(rows); err != nil {
				rows.Close()
				return tag, false, err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return tag, false, err
		}
		tag = rows.CommandTag()
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return tag, false, err
	}
	_, err = br.Exec() // the wake
	return tag, true, err
}

// LogWakeErrors has the store log, as a warning on l, a wake that failed
// after its insert committed (ADR-0061). The jobs are in and the gateways
// find them at their next poll, so the insert succeeds; but a wake fails
// only when Postgres's NOTIFY queue is full, because some listener
// stopped reading, which is worth an operator's attention.
func LogWakeErrors(l *slog.Logger) Option {
	return func(s *Store) {
		s.onWakeError = func(err error) {
			l.Warn("the gateways' wake after a committed submit failed; they find its jobs at their next poll",
				logging.Error, err)
		}
	}
}

// insertStatement is the statement that inserts jobs with conflict
// handling: the unique insert when one of them is unique.
func insertStatement(jobs []pulsetype.NewJob) string {
	for i := range jobs {
		if jobs[i].UniqueFor > 0 {
			return insertUniqueSQL
		}
	}
	return insertSQL
}

// isUniqueRace: a unique batch claimed a key for a job the same statement
// then did not insert (see uniqueInsert), so the statement failed whole.
func isUniqueRace(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503" && pgErr.ConstraintName == "job_uniques_job_id_fkey"
}

// resolve answers the jobs insertRows wrote or found: a job not inserted is
// a duplicate. A unique job whose key another job holds resolves to that
// job; one that lost its idempotency key to a live job (an earlier submit,
// or an earlier entry of this same batch) resolves to that job's id. A job
// whose holder is gone by the time it is looked up (it finished, its
// period ended, retention deleted it) is inserted after all. Jobs with an
// error in errs keep it; errs may be nil.
func (s *Store) resolve(ctx context.Context, jobs []pulsetype.NewJob, fresh []bool, errs []error) ([]pulsetype.Inserted, []error) {
	n := len(jobs)
	failed := func(i int) bool { return errs != nil && errs[i] != nil }
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, n)
		}
		errs[i] = err
	}
	out := make([]pulsetype.Inserted, n)
	var unique []int // not inserted, unique: look up the key's holder first
	var keyed []int  // not inserted, with an idempotency key
	for i := range jobs {
		if failed(i) {
			continue
		}
		out[i].ID = jobs[i].ID
		if fresh[i] {
			continue
		}
		out[i].Duplicate = true
		if jobs[i].UniqueFor > 0 {
			unique = append(unique, i)
		} else if jobs[i].IdempotencyKey != "" {
			keyed = append(keyed, i)
		}
	}
	var retry []int
	if len(unique) > 0 {
		holders, err := s.uniqueHolders(ctx, jobs, unique)
		for _, i := range unique {
			switch id, ok := holders[i]; {
			case err != nil:
				out[i] = pulsetype.Inserted{}
				fail(i, err)
			case ok:
				out[i].ID = id
			case jobs[i].IdempotencyKey != "":
				keyed = append(keyed, i)
			default:
				retry = append(retry, i)
			}
		}
	}
	if len(keyed) > 0 {
		keys := make([]string, len(keyed))
		for k, i := range keyed {
			keys[k] = jobs[i].IdempotencyKey
		}
		holders, err := s.keyHolders(ctx, keys)
		for _, i := range keyed {
			switch id, ok := holders[jobs[i].IdempotencyKey]; {
			case err != nil:
				out[i] = pulsetype.Inserted{}
				fail(i, err)
			case ok:
				out[i].ID = id
			default:
				// The holder finished between our insert and our lookup: the
				// key is free again, so this job must be inserted after all.
				retry = append(retry, i)
			}
		}
	}
	if len(retry) > 0 {
		again := make([]pulsetype.NewJob, len(retry))
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

// uniqueHolders finds the job holding the unique key of each of jobs[at],
// keyed by index into jobs.
func (s *Store) uniqueHolders(ctx context.Context, jobs []pulsetype.NewJob, at []int) (map[int]uuid.UUID, error) {
	topics := make([]string, len(at))
	args := make([]string, len(at))
	for k, i := range at {
		topics[k], args[k] = jobs[i].Topic, string(jobs[i].Args)
	}
	rows, err := s.pool.Query(ctx, uniqueHoldersSQL, topics, args)
	if err != nil {
		return nil, interpretError("resolve unique jobs", err)
	}
	defer rows.Close()
	holders := make(map[int]uuid.UUID, len(at))
	for rows.Next() {
		var ord int64
		var id uuid.UUID
		if err := rows.Scan(&ord, uuidDest(&id)); err != nil {
			return nil, interpretError("resolve unique jobs", err)
		}
		holders[at[ord-1]] = id
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("resolve unique jobs", err)
	}
	return holders, nil
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
func (s *Store) refusal(ctx context.Context, jobs []pulsetype.NewJob, err error) error {
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
func (s *Store) locate(ctx context.Context, jobs []pulsetype.NewJob) (at int, err error, ok bool) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, nil, false
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // always rolled back
	_, errs := Isolate(jobs, func(batch []pulsetype.NewJob) ([]struct{}, error) {
		sp, err := tx.Begin(ctx) // SAVEPOINT
		if err != nil {
			return nil, err
		}
		if _, err := sp.Exec(ctx, insertStatement(batch), insertParams(batch)...); err != nil {
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
func rowError(job pulsetype.NewJob, err error) error {
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
func storableRow(job pulsetype.NewJob) error {
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
	if err := storable.Text("rate_key", job.RateKey); err != nil {
		return err
	}
	if err := storable.Text("concurrency_key", job.ConcurrencyKey); err != nil {
		return err
	}
	if err := storable.Text("sequence_key", job.SequenceKey); err != nil {
		return err
	}
	return storable.Text("tracestate", job.TraceState)
}

// plainBatch reports whether jobs can conflict only on their ids: none
// carries an idempotency key, a schedule id (a schedule fire's id is
// derived from its occurrence and is meant to repeat) or a unique period.
func plainBatch(jobs []pulsetype.NewJob) bool {
	for i := range jobs {
		if jobs[i].IdempotencyKey != "" || jobs[i].ScheduleID != nil || jobs[i].UniqueFor > 0 {
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
