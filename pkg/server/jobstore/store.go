package jobstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/uptrace/bun"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// ReadyChannel is the NOTIFY channel that announces claimable jobs; the
// payload is the topic. The insert trigger and RetryJob send on it.
const ReadyChannel = "pulse_jobs_ready"

// Store runs the lifecycle statements against one pool. Its read side
// (reads.go, ADR-0014) opens a database/sql handle on the same pool on
// first use; Close releases it.
type Store struct {
	pool *pgxpool.Pool
	// writer names this process in job_throughput (throughput.go).
	writer string
	// onWakeError is told when the wake after a committed insert failed
	// (LogWakeErrors).
	onWakeError func(error)

	readOnce sync.Once
	readDB   *bun.DB

	// rateWaits holds, per rate-limited topic, when its window next gives
	// room, as the last short claim of it found (rate_wait.go).
	rateWaits sync.Map
}

// Option configures a Store.
type Option func(*Store)

// New returns a Store on pool.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, writer: DefaultWriter}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Pool exposes the underlying pool for callers that run their own reads.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// interpretError is the one boundary where database errors become pulse's
// typed errors: no rows → not found, the lifecycle rules (the transition
// trigger and the other guards, lifecycleRules) → invalid transition, the
// other CHECK constraints → invalid argument naming the field, connection
// trouble and a statement Postgres rolled back on its own (a deadlock, a
// lock wait past lock_timeout, a serialization failure) → unavailable.
func interpretError(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23514" && lifecycleRules[pgErr.ConstraintName]:
			return withCause(apierr.InvalidTransition("%s: %s", op, pgErr.Message), pgErr)
		case pgErr.Code == "23503" && pgErr.ConstraintName == "job_uniques_job_id_fkey":
			// A unique job lost its idempotency key to a submit that
			// committed during its insert, again and again (insertRows
			// retries): nothing was written; the caller may retry.
			return apierr.Unavailable(op+": a concurrent submit took this job's idempotency key; retry", err)
		case pgErr.Code == "23505" && pgErr.ConstraintName == "jobs_idempotency_key_live_idx":
			return withCause(apierr.InvalidTransition("%s: another live job holds this idempotency key", op), pgErr)
		case pgErr.Code == "23514":
			return withCause(apierr.Invalid(constraintField(pgErr.ConstraintName), "%s", pgErr.Message), pgErr)
		case pgErr.Code == "22P02" || pgErr.Code == "22023":
			return withCause(apierr.Invalid("", "%s: %s", op, pgErr.Message), pgErr)
		case unstorable(pgErr.Code):
			// A value Postgres cannot store (package storable refuses these
			// at the edge; this is the backstop): the caller's data, not a
			// server fault.
			return withCause(apierr.Invalid(pgErr.ColumnName, "%s: %s", op, pgErr.Message), pgErr)
		case pgErr.Code == "57014" && strings.Contains(pgErr.Message, "statement timeout"):
			return fmt.Errorf("%s: %w", op, ErrStatementTimeout)
		case rolledBack(pgErr.Code):
			// Postgres gave up on the statement for its own reasons and
			// rolled it back: nothing was written, and the same call can
			// succeed now. An operator's DDL on jobs under a lock_timeout,
			// a deadlock with it, a serializable transaction of someone
			// else's: transient, as an outage is, never the caller's fault.
			return apierr.Unavailable(op+": the database rolled the statement back, nothing was written; retry", err)
		case pgErr.Code[:2] == "08" || pgErr.Code[:2] == "57" || pgErr.Code[:2] == "53":
			// connection exception, operator intervention (shutdown), insufficient resources
			return apierr.Unavailable(op, err)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	if errors.As(err, &netErr) || errors.As(err, &connectErr) || pgconn.SafeToRetry(err) || errors.Is(err, pgx.ErrTxClosed) ||
		connectionLost(err) {
		return apierr.Unavailable(op+": database unreachable", err)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return apierr.ErrNotFound
	}
	return fmt.Errorf("%s: %w", op, err)
}

// connectionLost says whether err is a connection that ended under a
// statement: Postgres closed it (a crash, a restart) after the statement
// was sent, which pgx reports as the socket's end of file and database/sql
// (the read side, bun) as a bad or finished connection.
func connectionLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone)
}

// ErrStatementTimeout is a statement Postgres canceled at its
// statement_timeout: a read or operator statement of control-api past
// PULSE_READ_TIMEOUT, or a claim past ClaimStatementTimeout. It is
// context.DeadlineExceeded to errors.Is, so it answers DeadlineExceeded on
// gRPC and 504 on HTTP, with its text: it says what to change, and holds
// nothing of the database.
var ErrStatementTimeout error = statementTimeout{}

type statementTimeout struct{}

func (statementTimeout) Error() string {
	return "the statement ran past its statement timeout and Postgres canceled it; narrow the query (a topic, a status, a shorter range) or raise PULSE_READ_TIMEOUT"
}

func (statementTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// rolledBack reports whether code is Postgres ending a statement that
// no input of it caused: 40001 serialization failure, 40P01 deadlock
// detected (Postgres broke a cycle of lock waits by failing one), 55P03
// lock not available (a lock wait past the session's lock_timeout, which
// a database or role default may set). The statement's transaction is
// rolled back.
func rolledBack(code string) bool {
	switch code {
	case "40001", "40P01", "55P03":
		return true
	}
	return false
}

// unstorable reports whether code is Postgres refusing a value it cannot
// store: 22021 invalid byte sequence (bad UTF-8, NUL in text), 22P05
// untranslatable character (\u0000 or a lone surrogate in jsonb), 22003
// numeric value out of range, 22008 datetime field overflow.
func unstorable(code string) bool {
	switch code {
	case "22021", "22P05", "22003", "22008":
		return true
	}
	return false
}

// causedError is a typed error made from a Postgres error that keeps the
// Postgres error in its chain: callers see the typed error's kind and
// message (apierr), and IsDataError still sees what Postgres refused, so a
// batch refused by a CHECK constraint can be split (Isolate).
type causedError struct {
	typed error
	cause *pgconn.PgError
}

func withCause(typed error, cause *pgconn.PgError) error {
	return &causedError{typed: typed, cause: cause}
}

func (e *causedError) Error() string   { return e.typed.Error() }
func (e *causedError) Unwrap() []error { return []error{e.typed, e.cause} }

// lifecycleRules are the schema's rules about a job's life rather than
// the shape of a value (migrations 00001 and 00005, ADR-0002): breaking
// one is an invalid transition, not an invalid argument.
var lifecycleRules = map[string]bool{
	"jobs_status_transition":          true, // the status table; COMPLETED is final
	"jobs_attempts_fence":             true, // a claim adds one, a retry resets to 0
	"jobs_terminal_frozen":            true, // DEAD_LETTERED and CANCELED change only by a retry
	"jobs_born_pending":               true, // an INSERT makes a fresh PENDING job
	"jobs_identity_immutable":         true, // id, topic, args, submitted_at, idempotency_key, schedule_id
	"jobs_errors_append_only":         true, // the error history only grows
	"jobs_locked_by_claim_only":       true, // locked_by changes only in a claim
	"jobs_timestamps_not_future":      true, // started_at, finished_at not ahead of the clock
	"jobs_timestamps_ordered":         true, // nothing starts or finishes before it was submitted
	"jobs_delete_terminal_only":       true, // only a finished job is deleted
	"jobs_result_only_completed":      true, // only a COMPLETED job has a result
	"jobs_progress_lease_holder_only": true, // progress and metadata change only within a running attempt
}

func constraintField(name string) string {
	switch name {
	case "jobs_topic_format":
		return "topic"
	case "jobs_args_object":
		return "args"
	case "jobs_priority_range":
		return "priority"
	case "jobs_max_attempts_range", "jobs_attempts_within_max", "jobs_queued_has_attempts_left":
		return "max_attempts"
	case "jobs_timestamps_finite":
		return "run_at" // the one timestamp a caller gives (next_run_at)
	case "jobs_locked_by_not_empty":
		return "worker_id"
	case "jobs_idempotency_key_length":
		return "idempotency_key"
	case "jobs_timeout_range":
		return "timeout"
	case "jobs_result_size":
		return "result"
	case "jobs_tags_format":
		return "tags"
	case "jobs_replace_key_length":
		return "replace_key"
	case "jobs_progress_range":
		return "progress"
	case "jobs_metadata_object", "jobs_metadata_size":
		return "metadata"
	case "job_uniques_period_range":
		return "unique_for"
	case "dispatch_control_scope_format", "topic_limits_topic_format":
		return "topic"
	case "topic_limits_max_running_range":
		return "max_running"
	case "jobs_rate_key_format", "topic_limits_rate_key_source":
		return "rate_key"
	case "topic_limits_rate_limit_range", "topic_limits_rate_complete", "topic_limits_has_a_limit":
		return "rate_limit"
	case "jobs_concurrency_key_format":
		return "concurrency_key"
	case "jobs_sequence_key_format", "jobs_sequence_key_topic", "jobs_sequence_pos_assigned":
		return "sequence_key"
	case "topic_limits_max_running_per_key_range", "topic_limits_keys_or_rate":
		return "max_running_per_key"
	case "topic_limits_sequence_on_failure_known":
		return "sequence_on_failure"
	case "topic_limits_rate_interval_range":
		return "rate_interval"
	case "topic_limits_updated_by_present":
		return "actor"
	case "dispatch_control_mode_known", "control_events_mode_known":
		return "mode"
	case "dispatch_control_reason_length", "dispatch_control_paused_explained":
		return "reason"
	}
	return name
}

// intervalOf renders d for a ::interval parameter with microsecond precision.
func intervalOf(d time.Duration) string {
	return fmt.Sprintf("%d microseconds", d.Microseconds())
}
