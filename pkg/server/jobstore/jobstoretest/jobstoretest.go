// Package jobstoretest builds job rows in any lifecycle state for tests, the
// only way the schema lets anyone (migration 00005, ADR-0002): the job is
// born PENDING and reaches its state through the transitions the lifecycle
// allows — claims, failures, completion, cancel — each a raw UPDATE of that
// one row, so a test chooses the worker, the attempts made and the
// timestamps. All of it is one transaction: no claim in a running fleet
// can see the job half built.
package jobstoretest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// DB begins the transaction Create works in: a *pgxpool.Pool, a *pgx.Conn
// or a pgx.Tx (which nests as a savepoint).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Spec describes the job to build. Zero fields take the defaults given.
// Times left zero are the database's now() (never ahead of submitted_at),
// so a test against a server with another clock still builds legal rows.
type Spec struct {
	ID     uuid.UUID        // a fresh uuid v7
	Status pulsetype.Status // PENDING
	Topic  string           // "test.topic"
	Args   string           // "{}"
	// Priority is stored as given: 0 is the lowest priority.
	Priority    int16
	MaxAttempts int32 // 3
	// Attempts is how many claims the job has had. PENDING has had none
	// (a retried job starts again at 0); CANCELED defaults to none
	// (canceled while waiting); the other statuses default to 1. Every
	// attempt but the last failed; the last is the status's own: still
	// running (RUNNING), failed (RETRYING, DEAD_LETTERED), completed
	// (COMPLETED) or canceled while running (CANCELED).
	Attempts int32
	// Worker is locked_by of every claim: "worker-a".
	Worker string
	// FailureError, when set, is the error each failed attempt appends to
	// the history ({attempt, error, worker, at}); empty appends nothing.
	FailureError   string
	IdempotencyKey string
	ScheduleID     *uuid.UUID

	SubmittedAt time.Time // now()
	// RunAt is next_run_at at birth (a RETRYING job keeps it): submitted_at.
	RunAt time.Time
	// StartedAt is started_at of every claim: now(), or submitted_at if
	// that is later.
	StartedAt time.Time
	// LeaseIn sets a RUNNING job's lease_until to the database's now() plus
	// LeaseIn; negative has it lapsed. Zero: one minute.
	LeaseIn time.Duration
	// FinishedAt is a terminal job's finished_at: now(), or started_at or
	// submitted_at if later.
	FinishedAt time.Time
}

const (
	bornSQL = `
INSERT INTO jobs (id, topic, args, priority, max_attempts, submitted_at, next_run_at, idempotency_key, schedule_id)
VALUES ($1, $2, $3::jsonb, $4, $5, COALESCE($6::timestamptz, now()), COALESCE($7::timestamptz, $6::timestamptz, now()),
        NULLIF($8, ''), $9)`
	claimSQL = `
UPDATE jobs
SET status = 'RUNNING', attempts = attempts + 1, locked_by = $2,
    lease_until = now() + $3::interval,
    started_at = COALESCE($4::timestamptz, GREATEST(now(), submitted_at))
WHERE id = $1 AND status IN ('PENDING', 'RETRYING')`
	// failSQL settles the running attempt as a failure: RETRYING, or
	// DEAD_LETTERED when $2.
	failSQL = `
UPDATE jobs
SET status = CASE WHEN $2 THEN 'DEAD_LETTERED' ELSE 'RETRYING' END,
    lease_until = NULL,
    finished_at = CASE WHEN $2 THEN COALESCE($3::timestamptz, GREATEST(now(), started_at)) END,
    errors = CASE WHEN $4 = '' THEN errors ELSE errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempts, 'error', $4::text, 'worker', locked_by, 'at', GREATEST(now(), started_at))) END
WHERE id = $1 AND status = 'RUNNING'`
	completeSQL = `
UPDATE jobs
SET status = 'COMPLETED', lease_until = NULL,
    finished_at = COALESCE($2::timestamptz, GREATEST(now(), started_at))
WHERE id = $1 AND status = 'RUNNING'`
	cancelSQL = `
UPDATE jobs
SET status = 'CANCELED', lease_until = NULL,
    finished_at = COALESCE($2::timestamptz, GREATEST(now(), started_at, submitted_at))
WHERE id = $1 AND status IN ('PENDING', 'RETRYING', 'RUNNING')`
)

// Create builds the job s describes and returns its id. The schema has the
// last word: a Spec it refuses (a RETRYING job without an attempt left, a
// started_at before submitted_at...) fails with Postgres's error.
func Create(ctx context.Context, db DB, s Spec) (uuid.UUID, error) {
	if s.ID == uuid.Nil {
		s.ID = uuid.Must(uuid.NewV7())
	}
	if s.Status == "" {
		s.Status = pulsetype.StatusPending
	}
	if !s.Status.Valid() {
		return uuid.Nil, fmt.Errorf("jobstoretest: unknown status %q", s.Status)
	}
	if s.Topic == "" {
		s.Topic = "test.topic"
	}
	if s.Args == "" {
		s.Args = "{}"
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = 3
	}
	if s.Worker == "" {
		s.Worker = "worker-a"
	}
	if s.LeaseIn == 0 {
		s.LeaseIn = time.Minute
	}
	switch s.Status {
	case pulsetype.StatusPending:
		if s.Attempts != 0 {
			return uuid.Nil, errors.New("jobstoretest: a PENDING job has made no attempt (a retry resets attempts to 0)")
		}
	case pulsetype.StatusCanceled:
	default:
		if s.Attempts == 0 {
			s.Attempts = 1
		}
	}

	tx, err := db.Begin(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	step := func(what, sql string, args ...any) error {
		tag, err := tx.Exec(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("jobstoretest: %s job %s: %w", what, s.ID, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("jobstoretest: %s job %s: changed %d rows", what, s.ID, tag.RowsAffected())
		}
		return nil
	}
	lease := fmt.Sprintf("%d microseconds", s.LeaseIn.Microseconds())
	if err := step("insert", bornSQL, s.ID, s.Topic, s.Args, s.Priority, s.MaxAttempts,
		timeOrNil(s.SubmittedAt), timeOrNil(s.RunAt), s.IdempotencyKey, s.ScheduleID); err != nil {
		return uuid.Nil, err
	}
	for attempt := int32(1); attempt <= s.Attempts; attempt++ {
		if err := step("claim", claimSQL, s.ID, s.Worker, lease, timeOrNil(s.StartedAt)); err != nil {
			return uuid.Nil, err
		}
		last := attempt == s.Attempts
		if !last || s.Status == pulsetype.StatusRetrying {
			if err := step("fail", failSQL, s.ID, false, nil, s.FailureError); err != nil {
				return uuid.Nil, err
			}
		}
	}
	switch s.Status {
	case pulsetype.StatusCompleted:
		err = step("complete", completeSQL, s.ID, timeOrNil(s.FinishedAt))
	case pulsetype.StatusDeadLettered:
		err = step("dead-letter", failSQL, s.ID, true, timeOrNil(s.FinishedAt), s.FailureError)
	case pulsetype.StatusCanceled:
		err = step("cancel", cancelSQL, s.ID, timeOrNil(s.FinishedAt))
	}
	if err != nil {
		return uuid.Nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return uuid.Nil, err
	}
	return s.ID, nil
}

// MustCreate is Create that fails the test on error.
func MustCreate(tb testing.TB, db DB, s Spec) uuid.UUID {
	tb.Helper()
	id, err := Create(context.Background(), db, s)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Execer runs a statement outside any transaction: a *pgxpool.Pool or a
// *pgx.Conn.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// BloatIndexes leaves the jobs table's indexes many times larger than their
// entries need, as a long transaction followed by a vacuum does: it inserts
// made PENDING jobs of topic, cancels and deletes all but keep of them, and
// vacuums the table, so the emptied index pages are free for reuse but the
// files keep their size.
func BloatIndexes(tb testing.TB, db Execer, topic string, made, keep int) {
	tb.Helper()
	ctx := context.Background()
	steps := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO jobs (id, topic) SELECT gen_random_uuid(), $1 FROM generate_series(1, $2::int)`, []any{topic, made}},
		{`UPDATE jobs SET status = 'CANCELED', finished_at = now()
		   WHERE id IN (SELECT id FROM jobs WHERE topic = $1 AND status = 'PENDING' ORDER BY id OFFSET $2::int)`, []any{topic, keep}},
		{`DELETE FROM jobs WHERE topic = $1 AND status = 'CANCELED'`, []any{topic}},
	}
	for _, step := range steps {
		// Each statement's row counts reach the statistics before it
		// returns, not up to a second later: one that came after the
		// vacuum below would count its deleted rows as dead again, and
		// the reindexer's estimate counts those.
		sql := `WITH step AS (` + step.sql + ` RETURNING 1) SELECT pg_stat_force_next_flush() FROM (SELECT count(*) FROM step) AS n`
		if _, err := db.Exec(ctx, sql, step.args...); err != nil {
			tb.Fatalf("bloat indexes: %v", err)
		}
	}
	if _, err := db.Exec(ctx, `VACUUM (ANALYZE) jobs`); err != nil {
		tb.Fatalf("bloat indexes: vacuum: %v", err)
	}
}

// SlowVacuum starts a VACUUM of the jobs table that sleeps after every page
// (vacuum_cost_delay), on a connection of its own, and returns once
// Postgres reports it in progress. The function it returns cancels the
// vacuum and waits for it to end; it also runs at the test's end. The table
// needs dead row versions on many pages for the vacuum to take long.
func SlowVacuum(tb testing.TB, pool *pgxpool.Pool) (stop func()) {
	tb.Helper()
	return slowMaintenance(tb, pool, "VACUUM jobs", "pg_stat_progress_vacuum")
}

// SlowAnalyze is SlowVacuum for an ANALYZE of the jobs table (as an
// autovacuum runs after its vacuum), which takes the same table lock. The
// table needs a few hundred pages for the analyze to take long.
func SlowAnalyze(tb testing.TB, pool *pgxpool.Pool) (stop func()) {
	tb.Helper()
	return slowMaintenance(tb, pool, "ANALYZE jobs", "pg_stat_progress_analyze")
}

// slowMaintenance runs stmt (a VACUUM or ANALYZE, which sleep at every
// page under vacuum_cost_delay) as SlowVacuum describes, waiting until
// progressView reports it.
func slowMaintenance(tb testing.TB, pool *pgxpool.Pool, stmt, progressView string) (stop func()) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		tb.Fatalf("slow %s: %v", stmt, err)
	}
	var pid int32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		tb.Fatalf("slow %s: %v", stmt, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, `SET vacuum_cost_delay = 100; SET vacuum_cost_limit = 1`)
		if err == nil {
			_, err = conn.Exec(ctx, stmt)
		}
		_, _ = conn.Exec(ctx, `RESET vacuum_cost_delay; RESET vacuum_cost_limit`)
		conn.Release()
		done <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if _, err := pool.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid); err != nil {
				tb.Errorf("slow %s: cancel: %v", stmt, err)
			}
			var pgErr *pgconn.PgError
			if err := <-done; err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "57014") {
				tb.Errorf("slow %s: %v", stmt, err) // anything but the cancel
			}
		})
	}
	tb.Cleanup(stop)
	proctest.WaitFor(tb, "the "+stmt+" to be in progress", func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM `+progressView+` WHERE pid = $1`, pid).Scan(&n)
		return err == nil && n == 1
	})
	return stop
}

// HoldSnapshot opens a REPEATABLE READ transaction that has read jobs, as
// an analytics query does, and returns the function that ends it; the
// test's end ends it too.
func HoldSnapshot(tb testing.TB, pool *pgxpool.Pool) (release func()) {
	tb.Helper()
	ctx := context.Background()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		tb.Fatalf("hold a snapshot: %v", err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	tb.Cleanup(release)
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM jobs`); err != nil {
		tb.Fatalf("hold a snapshot: %v", err)
	}
	return release
}
