package jobstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/testtool"
)

// allowed is the transition table (migrations/00001_baseline.sql).
var allowed = map[[2]pulsetype.Status]bool{
	{pulsetype.StatusPending, pulsetype.StatusRunning}:      true,
	{pulsetype.StatusRetrying, pulsetype.StatusRunning}:     true,
	{pulsetype.StatusRunning, pulsetype.StatusCompleted}:    true,
	{pulsetype.StatusRunning, pulsetype.StatusRetrying}:     true,
	{pulsetype.StatusRunning, pulsetype.StatusDeadLettered}: true,
	{pulsetype.StatusPending, pulsetype.StatusCanceled}:     true,
	{pulsetype.StatusRetrying, pulsetype.StatusCanceled}:    true,
	{pulsetype.StatusRunning, pulsetype.StatusCanceled}:     true,
	{pulsetype.StatusDeadLettered, pulsetype.StatusPending}: true,
	{pulsetype.StatusCanceled, pulsetype.StatusPending}:     true,
	{pulsetype.StatusRunning, pulsetype.StatusPending}:      true, // a snooze (migration 00006)
}

// transitionSQL moves a row to `to` while keeping every CHECK constraint
// satisfied, so only the transition trigger can object.
func transitionSQL(from, to pulsetype.Status) string {
	if from == pulsetype.StatusRunning && to == pulsetype.StatusPending { // a snooze
		return `UPDATE jobs SET status = 'PENDING', snoozes = snoozes + 1, lease_until = NULL, finished_at = NULL WHERE id = $1`
	}
	switch to {
	case pulsetype.StatusRunning:
		return `UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'w',
			lease_until = now() + interval '1 minute', started_at = now(), finished_at = NULL WHERE id = $1`
	case pulsetype.StatusPending:
		return `UPDATE jobs SET status = 'PENDING', attempts = 0, lease_until = NULL, finished_at = NULL WHERE id = $1`
	case pulsetype.StatusRetrying:
		return `UPDATE jobs SET status = 'RETRYING', lease_until = NULL, finished_at = NULL WHERE id = $1`
	default: // terminal
		return fmt.Sprintf(`UPDATE jobs SET status = '%s', lease_until = NULL, finished_at = now() WHERE id = $1`, to)
	}
}

func TestSchemaTransitions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()

	for _, from := range pulsetype.Statuses {
		for _, to := range pulsetype.Statuses {
			if from == to {
				continue
			}
			name := fmt.Sprintf("%s_to_%s", from, to)
			t.Run(name, func(t *testing.T) {
				// Built by legal transitions: PENDING and CANCELED have made no
				// attempt, every other status one (of 3).
				id := insertRow(t, pool, rowOpts{Status: from})
				_, err := pool.Exec(ctx, transitionSQL(from, to), id)
				if allowed[[2]pulsetype.Status{from, to}] {
					require.NoError(t, err, "Postgres must allow %s -> %s", from, to)
					require.Equal(t, to, statusOf(t, pool, id))
					return
				}
				requireConstraint(t, err, "jobs_status_transition")
				require.Equal(t, from, statusOf(t, pool, id), "a refused UPDATE changes nothing")
			})
		}
	}
}

func TestSchemaInvariants(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()

	cases := []struct {
		name       string
		from       pulsetype.Status
		sql        string
		constraint string
	}{
		{"RunningWithoutLeaseIsRefused", pulsetype.StatusPending,
			`UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'w', started_at = now() WHERE id = $1`,
			"jobs_running_is_leased"},
		{"RunningWithoutLockedByIsRefused", pulsetype.StatusPending,
			`UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, lease_until = now(), started_at = now() WHERE id = $1`,
			"jobs_running_is_leased"},
		{"ClaimWithoutAttemptIncrementIsRefused", pulsetype.StatusPending,
			`UPDATE jobs SET status = 'RUNNING', locked_by = 'w', lease_until = now(), started_at = now() WHERE id = $1`,
			"jobs_attempts_fence"},
		{"LoweringMaxAttemptsBelowAttemptsIsRefused", pulsetype.StatusRunning,
			`UPDATE jobs SET max_attempts = 1 WHERE id = $1`, "jobs_attempts_within_max"},
		{"RewindingAttemptsIsRefused", pulsetype.StatusRunning,
			`UPDATE jobs SET attempts = 0 WHERE id = $1`,
			"jobs_attempts_fence"},
		{"PriorityOutOfRangeIsRefused", pulsetype.StatusPending,
			`UPDATE jobs SET priority = 11 WHERE id = $1`, "jobs_priority_range"},
		{"NegativePriorityIsRefused", pulsetype.StatusPending,
			`UPDATE jobs SET priority = -1 WHERE id = $1`, "jobs_priority_range"},
		{"MaxAttemptsOutOfRangeIsRefused", pulsetype.StatusPending,
			`UPDATE jobs SET max_attempts = 101 WHERE id = $1`, "jobs_max_attempts_range"},
		{"TerminalWithoutFinishedAtIsRefused", pulsetype.StatusRunning,
			`UPDATE jobs SET status = 'COMPLETED', lease_until = NULL WHERE id = $1`, "jobs_finished_iff_terminal"},
		{"LeaveRunningKeepingLeaseIsRefused", pulsetype.StatusRunning,
			`UPDATE jobs SET status = 'COMPLETED', finished_at = now() WHERE id = $1`, "jobs_running_is_leased"},
		{"CompletedIsFinal", pulsetype.StatusCompleted,
			`UPDATE jobs SET priority = 1 WHERE id = $1`, "jobs_status_transition"},
		{"UnknownStatusIsRefusedAtBirth", pulsetype.StatusPending,
			`INSERT INTO jobs (id, topic, status) SELECT gen_random_uuid(), 't', 'PAUSED' WHERE $1::uuid IS NOT NULL`, "jobs_born_pending"},
		// PAUSED is off the transition table too, but CHECKs are checked as
		// the row is written, before the AFTER UPDATE guard (migration 00013).
		{"UnknownStatusUpdateIsRefused", pulsetype.StatusPending,
			`UPDATE jobs SET status = 'PAUSED' WHERE id = $1`, "jobs_status_known"},
		{"NonObjectArgsAreRefused", pulsetype.StatusPending,
			`INSERT INTO jobs (id, topic, args) SELECT gen_random_uuid(), 't', '[1,2]' WHERE $1::uuid IS NOT NULL`, "jobs_args_object"},
		{"BadTopicIsRefused", pulsetype.StatusPending,
			`INSERT INTO jobs (id, topic) SELECT gen_random_uuid(), 'has space' WHERE $1::uuid IS NOT NULL`, "jobs_topic_format"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := rowOpts{Status: tc.from}
			if tc.constraint == "jobs_attempts_within_max" {
				o.Attempts = 2 // running its attempt 2 of 3: max_attempts 1 is below it
			}
			id := insertRow(t, pool, o)
			_, err := pool.Exec(ctx, tc.sql, id)
			requireConstraint(t, err, tc.constraint)
		})
	}

	t.Run("HeartbeatStyleUpdatesPass", func(t *testing.T) {
		id := insertRow(t, pool, rowOpts{Status: pulsetype.StatusRunning})
		_, err := pool.Exec(ctx, `UPDATE jobs SET lease_until = now() + interval '5 minutes' WHERE id = $1`, id)
		require.NoError(t, err)
	})
}

// requireConstraint: Postgres refused the statement as a check_violation
// (SQLSTATE 23514) of the named rule, which is what interpretError maps.
func requireConstraint(t *testing.T, err error, constraint string) {
	t.Helper()
	requireRefusal(t, err, "23514", constraint)
}

// requireRefusal: Postgres refused the statement with SQLSTATE code, by
// the named rule.
func requireRefusal(t *testing.T, err error, code, constraint string) {
	t.Helper()
	require.Error(t, err, "Postgres must refuse this statement (%s)", constraint)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a Postgres error, got %v", err)
	require.Equal(t, constraint, pgErr.ConstraintName, "refused by the wrong rule: %s", pgErr.Message)
	require.Equal(t, code, pgErr.Code, "refused with the wrong SQLSTATE: %s", pgErr.Message)
}

// notNullRule prefixes a refusal's rule that is a column's NOT NULL, which
// Postgres reports by column, not by constraint name.
const notNullRule = "NOT NULL "

// notNull is the rule of a refusal by a column's NOT NULL.
func notNull(column string) string { return notNullRule + column }

// requireNotNull: Postgres refused the statement as a not_null_violation
// (SQLSTATE 23502) of column.
func requireNotNull(t *testing.T, err error, column string) {
	t.Helper()
	require.Error(t, err, "Postgres must refuse this statement (NOT NULL %s)", column)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a Postgres error, got %v", err)
	require.Equal(t, "23502", pgErr.Code, "want a not_null_violation: %s", pgErr.Message)
	require.Equal(t, column, pgErr.ColumnName, "refused for the wrong column: %s", pgErr.Message)
}

// TestSchemaTopicRuleMatchesValidator: jobs_topic_format (rewritten for
// speed in migration 00004) and topic_limits_topic_format accept exactly
// the topics the API validator accepts, at every edge of the rule.
func TestSchemaTopicRuleMatchesValidator(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()

	topics := []string{
		"a", "Z", "0", "email.send", "a.b_c:d-e", "0._:-",
		strings.Repeat("a", 127), strings.Repeat("a", 128), strings.Repeat("a", 129),
		"", ".leading-dot", "_x", "-x", ":x", "has space", "tab\tx", "trailing\n",
		"ünïcode", "a/b", "a*", strings.Repeat("é", 10),
	}
	for _, topic := range topics {
		_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic) VALUES (gen_random_uuid(), $1)`, topic)
		// A topic's limit (migration 00009) holds the same rule.
		_, limitErr := pool.Exec(ctx, `INSERT INTO topic_limits (topic, max_running, updated_by) VALUES ($1, 1, 'test')`, topic)
		if jobspec.TopicPattern.MatchString(topic) {
			require.NoError(t, err, "topic %q passes the validator, so the schema must take it", topic)
			require.NoError(t, limitErr, "topic %q passes the validator, so a limit on it must be stored", topic)
		} else {
			requireConstraint(t, err, "jobs_topic_format")
			requireConstraint(t, limitErr, "topic_limits_topic_format")
		}
	}
}

// The lifecycle rules of migration 00005 (ADR-0002, amended), each broken
// in raw SQL the way a hand-typed statement or a buggy service would, and
// refused by Postgres with the rule's name.

// refusal is one statement that breaks one rule, run against a job built
// in a given state ($1 is its id). rule is the constraint name Postgres
// reports, or notNull(column).
type refusal struct {
	name string
	row  jobstoretest.Spec
	sql  string
	rule string
}

func runRefusals(t *testing.T, pool *pgxpool.Pool, cases []refusal) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := jobstoretest.MustCreate(t, pool, tc.row)
			var before string
			require.NoError(t, pool.QueryRow(ctx, `SELECT row_to_json(j)::text FROM jobs j WHERE id = $1`, id).Scan(&before))
			var args []any
			if strings.Contains(tc.sql, "$1") {
				args = append(args, id)
			}
			_, err := pool.Exec(ctx, tc.sql, args...)
			if column, ok := strings.CutPrefix(tc.rule, notNullRule); ok {
				requireNotNull(t, err, column)
			} else {
				requireConstraint(t, err, tc.rule)
			}
			var after string
			require.NoError(t, pool.QueryRow(ctx, `SELECT row_to_json(j)::text FROM jobs j WHERE id = $1`, id).Scan(&after))
			require.Equal(t, before, after, "a refused statement changes nothing")
		})
	}
}

// passes runs statements the rules allow.
func runPasses(t *testing.T, pool *pgxpool.Pool, cases []refusal) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := jobstoretest.MustCreate(t, pool, tc.row)
			tag, err := pool.Exec(ctx, tc.sql, id)
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected())
		})
	}
}

var (
	pendingJob  = jobstoretest.Spec{Status: pulsetype.StatusPending}
	runningJob  = jobstoretest.Spec{Status: pulsetype.StatusRunning, Worker: "w"}
	retryingJob = jobstoretest.Spec{Status: pulsetype.StatusRetrying, Worker: "w", FailureError: "boom"}
	deadJob     = jobstoretest.Spec{Status: pulsetype.StatusDeadLettered, Worker: "w", FailureError: "boom"}
	canceledJob = jobstoretest.Spec{Status: pulsetype.StatusCanceled, Attempts: 1, Worker: "w"}
	doneJob     = jobstoretest.Spec{Status: pulsetype.StatusCompleted, Worker: "w"}
)

func TestSchemaBirth(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	born := func(columns, values string) string {
		return `INSERT INTO jobs (id, topic, ` + columns + `) SELECT gen_random_uuid(), 't', ` + values + ` WHERE $1::uuid IS NOT NULL`
	}
	runRefusals(t, pool, []refusal{
		{"AJobBornRunningIsRefused", pendingJob,
			born(`status, attempts, locked_by, lease_until, started_at`, `'RUNNING', 1, 'w', now() + interval '1 minute', now()`), "jobs_born_pending"},
		{"AJobBornRetryingIsRefused", pendingJob, born(`status, attempts`, `'RETRYING', 1`), "jobs_born_pending"},
		{"AJobBornCompletedIsRefused", pendingJob, born(`status, attempts, finished_at`, `'COMPLETED', 1, now()`), "jobs_born_pending"},
		{"AJobBornDeadLetteredIsRefused", pendingJob, born(`status, finished_at`, `'DEAD_LETTERED', now()`), "jobs_born_pending"},
		{"AJobBornCanceledIsRefused", pendingJob, born(`status, finished_at`, `'CANCELED', now()`), "jobs_born_pending"},
		{"AJobBornWithAttemptsIsRefused", pendingJob, born(`attempts`, `1`), "jobs_born_pending"},
		{"AJobBornWithALeaseIsRefused", pendingJob, born(`lease_until`, `now() + interval '1 minute'`), "jobs_born_pending"},
		{"AJobBornLockedByAWorkerIsRefused", pendingJob, born(`locked_by`, `'w'`), "jobs_born_pending"},
		{"AJobBornWithAnEmptyLockedByIsRefused", pendingJob, born(`locked_by`, `''`), "jobs_born_pending"},
		{"AJobBornStartedIsRefused", pendingJob, born(`started_at`, `now()`), "jobs_born_pending"},
		{"AJobBornFinishedIsRefused", pendingJob, born(`finished_at`, `now()`), "jobs_born_pending"},
		{"AJobBornWithAnErrorHistoryIsRefused", pendingJob,
			born(`errors`, `'[{"attempt": 1, "error": "x", "worker": "w", "at": "2026-01-01T00:00:00Z"}]'`), "jobs_born_pending"},
		{"AJobBornWithAnInfiniteRunAtIsRefused", pendingJob, born(`next_run_at`, `'infinity'`), "jobs_timestamps_finite"},
		{"AJobBornAtMinusInfinityIsRefused", pendingJob, born(`submitted_at`, `'-infinity'`), "jobs_timestamps_finite"},
	})

	t.Run("AFreshPendingJobIsBorn", func(t *testing.T) {
		_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic) VALUES (gen_random_uuid(), 't')`)
		require.NoError(t, err)
	})
	t.Run("APendingJobWithAFutureRunAtIsBorn", func(t *testing.T) {
		_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic, next_run_at) VALUES (gen_random_uuid(), 't', now() + interval '1 day')`)
		require.NoError(t, err)
	})
	t.Run("AJobBornWithItsFieldsSpelledOutIsBorn", func(t *testing.T) {
		_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic, status, attempts, errors, submitted_at, next_run_at)
			VALUES (gen_random_uuid(), 't', 'PENDING', 0, '[]', now() - interval '1 hour', now() - interval '2 hours')`)
		require.NoError(t, err)
	})
	t.Run("EverySubmitPathBirthsLegally", func(t *testing.T) {
		store := newStore(t, pool)
		j := newJob("t", 5)
		j.RunAt = time.Now().Add(-time.Hour) // a schedule's occurrence, say
		j.IdempotencyKey = "k"
		_, err := store.Insert(ctx, []pulsetype.NewJob{j, newJob("t", 5)})
		require.NoError(t, err)
		_, err = store.Insert(ctx, []pulsetype.NewJob{newJob("t", 0), newJob("t", 10)})
		require.NoError(t, err)
	})
}

func TestSchemaIdentityIsImmutable(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	changes := []struct{ column, set string }{
		{"Id", `id = gen_random_uuid()`},
		{"Topic", `topic = 'other.topic'`},
		{"Args", `args = '{"x": 1}'`},
		{"ArgsToEqualJSONOfOtherBytes", `args = '{"n": 1.0}'`},
		{"SubmittedAt", `submitted_at = submitted_at - interval '1 second'`},
		{"IdempotencyKey", `idempotency_key = 'other-key'`},
		{"ClearedIdempotencyKey", `idempotency_key = NULL`},
		{"ScheduleId", `schedule_id = gen_random_uuid()`},
		{"ClearedScheduleId", `schedule_id = NULL`},
	}
	var cases []refusal
	for _, live := range []struct {
		name string
		row  jobstoretest.Spec
	}{{"Pending", pendingJob}, {"Running", runningJob}, {"Retrying", retryingJob}, {"DeadLettered", deadJob}, {"Canceled", canceledJob}} {
		for _, c := range changes {
			row := live.row
			row.Args = `{"n": 1}`
			row.IdempotencyKey = "key-" + live.name + "-" + c.column // a live key is unique
			sched := uuid.Must(uuid.NewV7())
			row.ScheduleID = &sched
			cases = append(cases, refusal{
				"Changing" + c.column + "Of" + live.name + "JobIsRefused", row,
				`UPDATE jobs SET ` + c.set + ` WHERE id = $1`, "jobs_identity_immutable"})
		}
	}
	runRefusals(t, pool, cases)

	runPasses(t, pool, []refusal{
		{"AssigningTheSameIdentityPasses", retryingJob,
			`UPDATE jobs SET id = id, topic = topic, args = args, submitted_at = submitted_at, idempotency_key = idempotency_key, schedule_id = schedule_id WHERE id = $1`, ""},
		{"ReprioritizingAWaitingJobPasses", pendingJob, `UPDATE jobs SET priority = 9 WHERE id = $1`, ""},
	})
}

func TestSchemaErrorHistoryIsAppendOnly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	twoErrors := jobstoretest.Spec{Status: pulsetype.StatusRetrying, Attempts: 2, Worker: "w", FailureError: "boom"}
	entry := `'[{"attempt": 9, "error": "x", "worker": "w", "at": "2026-01-01T00:00:00Z"}]'::jsonb`

	runRefusals(t, pool, []refusal{
		{"RewritingAnEntryIsRefused", twoErrors, `UPDATE jobs SET errors = jsonb_set(errors, '{0,error}', '"nothing happened"') WHERE id = $1`, "jobs_errors_append_only"},
		{"RewritingAnEntryToAnEqualNumberIsRefused", twoErrors, `UPDATE jobs SET errors = jsonb_set(errors, '{1,attempt}', '3') WHERE id = $1`, "jobs_errors_append_only"},
		{"DroppingTheHistoryIsRefused", twoErrors, `UPDATE jobs SET errors = '[]' WHERE id = $1`, "jobs_errors_append_only"},
		{"DroppingTheLastEntryIsRefused", twoErrors, `UPDATE jobs SET errors = errors - 1 WHERE id = $1`, "jobs_errors_append_only"},
		{"DroppingTheFirstEntryIsRefused", twoErrors, `UPDATE jobs SET errors = errors - 0 WHERE id = $1`, "jobs_errors_append_only"},
		{"ReorderingTheHistoryIsRefused", twoErrors,
			`UPDATE jobs SET errors = jsonb_build_array(errors -> 1, errors -> 0) WHERE id = $1`, "jobs_errors_append_only"},
		{"PrependingAnEntryIsRefused", twoErrors, `UPDATE jobs SET errors = ` + entry + ` || errors WHERE id = $1`, "jobs_errors_append_only"},
		{"ReplacingTheHistoryWithOneOfTheSameLengthIsRefused", twoErrors, `UPDATE jobs SET errors = ` + entry + ` || ` + entry + ` WHERE id = $1`, "jobs_errors_append_only"},
		// These three break the append-only guard and a rule Postgres checks
		// as the row is written, which names itself first since the guard
		// runs AFTER UPDATE (migration 00013): the column's NOT NULL, the
		// CHECK jobs_errors_array.
		{"ANullHistoryIsRefused", twoErrors, `UPDATE jobs SET errors = NULL WHERE id = $1`, notNull("errors")},
		{"ANonArrayHistoryIsRefused", twoErrors, `UPDATE jobs SET errors = '{}' WHERE id = $1`, "jobs_errors_array"},
		{"ANonArrayHistoryOfAFreshJobIsRefused", pendingJob, `UPDATE jobs SET errors = '"boom"' WHERE id = $1`, "jobs_errors_array"},
	})
	runPasses(t, pool, []refusal{
		{"AppendingAnEntryPasses", twoErrors, `UPDATE jobs SET errors = errors || ` + entry + ` WHERE id = $1`, ""},
		{"AppendingTwoEntriesPasses", twoErrors, `UPDATE jobs SET errors = errors || ` + entry + ` || ` + entry + ` WHERE id = $1`, ""},
		{"AFreshHistoryMayGrow", pendingJob, `UPDATE jobs SET errors = errors || ` + entry + ` WHERE id = $1`, ""},
		{"LeavingTheHistoryAsItIsPasses", twoErrors, `UPDATE jobs SET errors = errors WHERE id = $1`, ""},
	})
}

func TestSchemaFinishedJobsAreFrozen(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	var cases []refusal
	for _, finished := range []struct {
		name string
		row  jobstoretest.Spec
	}{{"DeadLettered", deadJob}, {"Canceled", canceledJob}} {
		for _, c := range []struct{ what, set string }{
			{"Priority", `priority = 1`},
			{"MaxAttempts", `max_attempts = 10`},
			// Later, not earlier: these jobs finished as they were submitted,
			// so an earlier finished_at breaks jobs_timestamps_ordered too,
			// a CHECK, which names itself before the AFTER UPDATE guard
			// (migration 00013).
			{"FinishedAt", `finished_at = finished_at + interval '1 second'`},
			{"NextRunAt", `next_run_at = now()`},
			{"History", `errors = errors || '[{"attempt": 2}]'`},
			{"TraceContext", `traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'`},
		} {
			cases = append(cases, refusal{
				"Changing" + c.what + "Of" + finished.name + "JobIsRefused", finished.row,
				`UPDATE jobs SET ` + c.set + ` WHERE id = $1`, "jobs_terminal_frozen"})
		}
	}
	cases = append(cases,
		refusal{"ChangingACompletedJobIsRefused", doneJob, `UPDATE jobs SET next_run_at = now() WHERE id = $1`, "jobs_status_transition"},
		refusal{"RetryingACompletedJobIsRefused", doneJob,
			`UPDATE jobs SET status = 'PENDING', attempts = 0, finished_at = NULL WHERE id = $1`, "jobs_status_transition"},
		refusal{"ARetryThatKeepsAttemptsIsRefused", canceledJob,
			`UPDATE jobs SET status = 'PENDING', finished_at = NULL WHERE id = $1`, "jobs_attempts_fence"},
		refusal{"ARetryThatDropsTheHistoryIsRefused", deadJob,
			`UPDATE jobs SET status = 'PENDING', attempts = 0, finished_at = NULL, errors = '[]' WHERE id = $1`, "jobs_errors_append_only"},
		refusal{"ARetryThatClearsLockedByIsRefused", deadJob,
			`UPDATE jobs SET status = 'PENDING', attempts = 0, finished_at = NULL, locked_by = NULL WHERE id = $1`, "jobs_locked_by_claim_only"},
	)
	runRefusals(t, pool, cases)

	t.Run("AnOperatorRetryKeepsTheHistoryAndResetsAttempts", func(t *testing.T) {
		id := jobstoretest.MustCreate(t, pool, jobstoretest.Spec{Status: pulsetype.StatusDeadLettered, Attempts: 3, Worker: "w", FailureError: "boom"})
		_, err := pool.Exec(ctx, `UPDATE jobs SET status = 'PENDING', attempts = 0, finished_at = NULL, next_run_at = now(), priority = 9 WHERE id = $1`, id)
		require.NoError(t, err)
		job, err := newStore(t, pool).Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pulsetype.StatusPending, job.Status)
		require.Zero(t, job.Attempts)
		require.Len(t, job.Errors, 3)
		require.Equal(t, "w", job.LockedBy, "the last attempt's worker stays until the next claim")
	})
}

func TestSchemaLockedByChangesOnlyInAClaim(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	runRefusals(t, pool, []refusal{
		{"HandingARunningJobToAnotherWorkerIsRefused", runningJob, `UPDATE jobs SET locked_by = 'thief' WHERE id = $1`, "jobs_locked_by_claim_only"},
		{"ClearingTheWorkerOfARetryingJobIsRefused", retryingJob, `UPDATE jobs SET locked_by = NULL WHERE id = $1`, "jobs_locked_by_claim_only"},
		{"NamingAWorkerForAPendingJobIsRefused", pendingJob, `UPDATE jobs SET locked_by = 'w' WHERE id = $1`, "jobs_locked_by_claim_only"},
		{"ClearingTheWorkerOnCompletionIsRefused", runningJob,
			`UPDATE jobs SET status = 'COMPLETED', lease_until = NULL, finished_at = now(), locked_by = NULL WHERE id = $1`, "jobs_locked_by_claim_only"},
		{"NamingAnotherWorkerOnCancelIsRefused", runningJob,
			`UPDATE jobs SET status = 'CANCELED', lease_until = NULL, finished_at = now(), locked_by = 'operator' WHERE id = $1`, "jobs_locked_by_claim_only"},
		{"AClaimByAnEmptyWorkerIdIsRefused", pendingJob,
			`UPDATE jobs SET status = 'RUNNING', attempts = 1, locked_by = '', lease_until = now() + interval '1 minute', started_at = now() WHERE id = $1`,
			"jobs_locked_by_not_empty"},
	})
	runPasses(t, pool, []refusal{
		{"AClaimNamesItsWorker", pendingJob,
			`UPDATE jobs SET status = 'RUNNING', attempts = 1, locked_by = 'w2', lease_until = now() + interval '1 minute', started_at = now() WHERE id = $1`, ""},
		{"AReclaimNamesANewWorker", retryingJob,
			`UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'w2', lease_until = now() + interval '1 minute', started_at = now() WHERE id = $1`, ""},
	})
}

func TestSchemaQueuedJobsCanAlwaysBeClaimed(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	lastAttempt := jobstoretest.Spec{Status: pulsetype.StatusRunning, Attempts: 3, MaxAttempts: 3, Worker: "w"}

	runRefusals(t, pool, []refusal{
		{"FailingTheLastAttemptIntoRetryingIsRefused", lastAttempt,
			`UPDATE jobs SET status = 'RETRYING', lease_until = NULL WHERE id = $1`, "jobs_queued_has_attempts_left"},
		{"LoweringMaxAttemptsOfARetryingJobToItsAttemptsIsRefused", retryingJob,
			`UPDATE jobs SET max_attempts = 1 WHERE id = $1`, "jobs_queued_has_attempts_left"},
		{"LoweringMaxAttemptsBelowTheAttemptsMadeIsRefused", lastAttempt,
			`UPDATE jobs SET max_attempts = 2 WHERE id = $1`, "jobs_attempts_within_max"},
		// Also a retry that keeps attempts (jobs_attempts_fence, alone in
		// TestSchemaFinishedJobsAreFrozen), but the CHECK is checked as the
		// row is written, before the AFTER UPDATE guard (migration 00013).
		{"ARetryWithoutAFreshBudgetIsRefused", jobstoretest.Spec{Status: pulsetype.StatusDeadLettered, Attempts: 3, MaxAttempts: 3},
			`UPDATE jobs SET status = 'PENDING', finished_at = NULL WHERE id = $1`, "jobs_queued_has_attempts_left"},
	})
	runPasses(t, pool, []refusal{
		{"FailingTheLastAttemptDeadLetters", lastAttempt,
			`UPDATE jobs SET status = 'DEAD_LETTERED', lease_until = NULL, finished_at = now() WHERE id = $1`, ""},
		{"LoweringMaxAttemptsOfARunningJobToItsAttemptPasses", jobstoretest.Spec{Status: pulsetype.StatusRunning, Attempts: 2},
			`UPDATE jobs SET max_attempts = 2 WHERE id = $1`, ""},
		{"RaisingMaxAttemptsPasses", retryingJob, `UPDATE jobs SET max_attempts = 10 WHERE id = $1`, ""},
	})

	t.Run("TheStoreDeadLettersAFailureOnTheLastAttempt", func(t *testing.T) {
		b := &testBundle{pool: pool, store: newStore(t, pool)}
		id := jobstoretest.MustCreate(t, pool, jobstoretest.Spec{Status: pulsetype.StatusRunning, Topic: "last.attempt", Attempts: 2, MaxAttempts: 2, Worker: "w"})
		acks, err := b.store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: id, Attempt: 2}, Outcome: pulsetype.OutcomeFail, Error: "boom"}})
		require.NoError(t, err)
		require.True(t, acks[0].Accepted)
		require.Equal(t, pulsetype.StatusDeadLettered, acks[0].Status)
	})
	t.Run("TheReaperDeadLettersALapseOnTheLastAttempt", func(t *testing.T) {
		b := &testBundle{pool: pool, store: newStore(t, pool)}
		id := jobstoretest.MustCreate(t, pool, jobstoretest.Spec{Status: pulsetype.StatusRunning, Topic: "last.lapse", Attempts: 1, MaxAttempts: 1, LeaseIn: -time.Second})
		reaped, err := b.store.Reap(ctx, 100)
		require.NoError(t, err)
		var status pulsetype.Status
		for _, r := range reaped {
			if r.ID == id {
				status = r.Status
			}
		}
		require.Equal(t, pulsetype.StatusDeadLettered, status)
	})
}

func TestSchemaTimestamps(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	claim := func(startedAt string) string {
		return `UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'w',
			lease_until = now() + interval '1 minute', started_at = ` + startedAt + ` WHERE id = $1`
	}
	complete := func(finishedAt string) string {
		return `UPDATE jobs SET status = 'COMPLETED', lease_until = NULL, finished_at = ` + finishedAt + ` WHERE id = $1`
	}
	submittedAnHourAgo := jobstoretest.Spec{Status: pulsetype.StatusPending, SubmittedAt: time.Now().Add(-time.Hour)}
	runningForAnHour := jobstoretest.Spec{Status: pulsetype.StatusRunning, SubmittedAt: time.Now().Add(-2 * time.Hour), StartedAt: time.Now().Add(-time.Hour)}

	runRefusals(t, pool, []refusal{
		{"AnInfiniteRunAtIsRefused", pendingJob, `UPDATE jobs SET next_run_at = 'infinity' WHERE id = $1`, "jobs_timestamps_finite"},
		{"ARunAtOfMinusInfinityIsRefused", pendingJob, `UPDATE jobs SET next_run_at = '-infinity' WHERE id = $1`, "jobs_timestamps_finite"},
		{"AnInfiniteLeaseIsRefused", runningJob, `UPDATE jobs SET lease_until = 'infinity' WHERE id = $1`, "jobs_timestamps_finite"},
		{"AStartAtMinusInfinityIsRefused", pendingJob, claim(`'-infinity'`), "jobs_timestamps_finite"},
		{"AFinishAtMinusInfinityIsRefused", runningJob, complete(`'-infinity'`), "jobs_timestamps_finite"},
		// Infinity is also in the future, but the CHECK is checked as the
		// row is written, before the AFTER UPDATE guard (migration 00013).
		{"AnInfiniteStartIsRefused", pendingJob, claim(`'infinity'`), "jobs_timestamps_finite"},
		{"AStartInTheFutureIsRefused", pendingJob, claim(`now() + interval '2 minutes'`), "jobs_timestamps_not_future"},
		{"AFinishInTheFutureIsRefused", runningJob, complete(`now() + interval '2 minutes'`), "jobs_timestamps_not_future"},
		{"ACancelInTheFutureIsRefused", pendingJob,
			`UPDATE jobs SET status = 'CANCELED', finished_at = clock_timestamp() + interval '1 hour' WHERE id = $1`, "jobs_timestamps_not_future"},
		{"AStartBeforeTheSubmitIsRefused", submittedAnHourAgo, claim(`submitted_at - interval '1 second'`), "jobs_timestamps_ordered"},
		{"AFinishBeforeTheSubmitIsRefused", runningForAnHour, complete(`submitted_at - interval '1 second'`), "jobs_timestamps_ordered"},
	})
	runPasses(t, pool, []refusal{
		{"AStartWithinAMinuteOfTheClockPasses", pendingJob, claim(`now() + interval '30 seconds'`), ""},
		{"AFinishWithinAMinuteOfTheClockPasses", runningJob, complete(`now() + interval '30 seconds'`), ""},
		{"AStartInThePastAfterTheSubmitPasses", submittedAnHourAgo, claim(`submitted_at + interval '1 second'`), ""},
		{"AFinishAsTheJobStartedPasses", runningForAnHour, complete(`started_at`), ""},
		{"ARunAtBeforeTheSubmitPasses", pendingJob, `UPDATE jobs SET next_run_at = submitted_at - interval '1 day' WHERE id = $1`, ""},
	})

	t.Run("AClaimNeverStartsAJobBeforeItsSubmit", func(t *testing.T) {
		// A job submitted with a past run_at whose submitted_at is after the
		// claim transaction's now(): the claim starts it at its submit.
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		var txNow time.Time
		require.NoError(t, tx.QueryRow(ctx, `SELECT now()`).Scan(&txNow))
		id := jobstoretest.MustCreate(t, pool, jobstoretest.Spec{Topic: "late.submit", SubmittedAt: time.Now().Add(2 * time.Second), RunAt: time.Now().Add(-time.Hour)})
		var started, submitted time.Time
		claimSQL := strings.Replace(jobstore.ClaimSQL, "RETURNING", "RETURNING j.started_at, j.submitted_at,", 1)
		var rest [12]any
		dest := []any{&started, &submitted}
		for i := range rest {
			dest = append(dest, &rest[i])
		}
		require.NoError(t, tx.QueryRow(ctx, claimSQL, []string{"late.submit"}, 1, []string{"w"}, "1 minute").Scan(dest...))
		require.True(t, txNow.Before(submitted), "the job was submitted after the claim's now()")
		require.True(t, started.Equal(submitted), "started %s, submitted %s", started, submitted)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, pulsetype.StatusRunning, statusOf(t, pool, id))
	})
}

func TestSchemaOnlyFinishedJobsAreDeleted(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	runRefusals(t, pool, []refusal{
		{"DeletingAPendingJobIsRefused", pendingJob, `DELETE FROM jobs WHERE id = $1`, "jobs_delete_terminal_only"},
		{"DeletingARunningJobIsRefused", runningJob, `DELETE FROM jobs WHERE id = $1`, "jobs_delete_terminal_only"},
		{"DeletingARetryingJobIsRefused", retryingJob, `DELETE FROM jobs WHERE id = $1`, "jobs_delete_terminal_only"},
		{"TruncatingWhileAJobIsLiveIsRefused", pendingJob, `TRUNCATE jobs, job_uniques, job_dependencies, job_replacements`, "jobs_delete_terminal_only"},
	})
	runPasses(t, pool, []refusal{
		{"DeletingACompletedJobPasses", doneJob, `DELETE FROM jobs WHERE id = $1`, ""},
		{"DeletingADeadLetteredJobPasses", deadJob, `DELETE FROM jobs WHERE id = $1`, ""},
		{"DeletingACanceledJobPasses", canceledJob, `DELETE FROM jobs WHERE id = $1`, ""},
	})

	t.Run("RetentionDeletesFinishedJobs", func(t *testing.T) {
		pool := pgtest.Pool(t)
		store := newStore(t, pool)
		var finished []uuid.UUID
		for _, s := range []jobstoretest.Spec{doneJob, deadJob, canceledJob, {Status: pulsetype.StatusCanceled}} {
			s.SubmittedAt = time.Now().Add(-2 * time.Hour)
			s.StartedAt = time.Now().Add(-90 * time.Minute)
			s.FinishedAt = time.Now().Add(-time.Hour)
			finished = append(finished, jobstoretest.MustCreate(t, pool, s))
		}
		live := []uuid.UUID{
			jobstoretest.MustCreate(t, pool, pendingJob),
			jobstoretest.MustCreate(t, pool, runningJob),
			jobstoretest.MustCreate(t, pool, retryingJob),
		}
		var deleted int64
		for _, s := range []pulsetype.Status{pulsetype.StatusCompleted, pulsetype.StatusDeadLettered, pulsetype.StatusCanceled} {
			n, err := store.DeleteFinished(ctx, s, time.Minute, 100)
			require.NoError(t, err)
			deleted += n
		}
		require.EqualValues(t, len(finished), deleted)
		left := remaining(t, pool)
		require.Len(t, left, len(live))
		for _, id := range live {
			require.True(t, left[id])
		}
	})

	t.Run("TruncatingFinishedJobsPasses", func(t *testing.T) {
		pool := pgtest.Pool(t)
		jobstoretest.MustCreate(t, pool, doneJob)
		jobstoretest.MustCreate(t, pool, canceledJob)
		_, err := pool.Exec(ctx, `TRUNCATE jobs, job_uniques, job_dependencies, job_replacements`)
		require.NoError(t, err)
		require.Empty(t, remaining(t, pool))
	})
}

// TestSchemaLegalPathsNeverEnterPLpgSQL runs every statement of a job's
// life through the store — insert, claim, heartbeat, each report outcome,
// reap, cancel, retry, retention — and checks that no guard function was
// called: the rules are CHECKs and WHEN clauses, so the happy path pays no
// PL/pgSQL. Function calls are counted by track_functions (see
// guardCallCounter).
func TestSchemaLegalPathsNeverEnterPLpgSQL(t *testing.T) {
	t.Parallel()
	pool, guardCalls := guardCallCounter(t)
	store := newStore(t, pool)

	// Submit, including a schedule's fire (past run_at, schedule id) and a
	// keyed job.
	sched := uuid.Must(uuid.NewV7())
	jobs := []pulsetype.NewJob{newJob("life", 5), newJob("life", 5), newJob("life", 5), newJob("life", 5), newJob("life", 5)}
	jobs[1].IdempotencyKey = "key"
	jobs[2].ScheduleID, jobs[2].RunAt = &sched, time.Now().Add(-time.Minute)
	jobs[3].MaxAttempts = 1
	_, err := store.Insert(ctx, []pulsetype.NewJob{jobs[0], jobs[3], jobs[4]}) // the plain INSERT
	require.NoError(t, err)
	_, err = store.Insert(ctx, jobs[1:3]) // INSERT ... ON CONFLICT DO NOTHING
	require.NoError(t, err)
	claimed, err := store.Claim(ctx, []string{"life"}, slots("w", 5), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 5)
	refs := make([]pulsetype.AttemptRef, len(claimed))
	for i, c := range claimed {
		refs[i] = pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}
	}
	_, err = store.Heartbeat(ctx, "w", refs, time.Minute)
	require.NoError(t, err)
	byID := map[uuid.UUID]pulsetype.AttemptRef{}
	for _, r := range refs {
		byID[r.ID] = r
	}
	setRetryPolicy(t, store, 0, 0)
	acks, err := store.Report(ctx, "w", []pulsetype.Result{
		{Ref: byID[jobs[0].ID], Outcome: pulsetype.OutcomeComplete},
		{Ref: byID[jobs[1].ID], Outcome: pulsetype.OutcomeFail, Error: "retry me"},
		{Ref: byID[jobs[2].ID], Outcome: pulsetype.OutcomeFailPermanent, Error: "bad input"},
		{Ref: byID[jobs[4].ID], Outcome: pulsetype.OutcomeSnooze, RetryAfter: time.Hour},
	})
	require.NoError(t, err)
	for _, a := range acks {
		require.True(t, a.Accepted, a.Reason)
	}
	// jobs[3] (its only attempt) lapses and is dead-lettered by the reaper.
	expireLease(t, pool, jobs[3].ID)
	reaped, err := store.Reap(ctx, 10)
	require.NoError(t, err)
	require.Len(t, reaped, 1)
	require.Equal(t, pulsetype.StatusDeadLettered, reaped[0].Status)
	// jobs[1] is claimed again, lapses and is retried by the reaper.
	again, err := store.Claim(ctx, []string{"life"}, slots("w2", 1), time.Minute)
	require.NoError(t, err)
	require.Len(t, again, 1)
	expireLease(t, pool, jobs[1].ID)
	setRetryPolicy(t, store, time.Hour, time.Hour)
	reaped, err = store.Reap(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, pulsetype.StatusRetrying, reaped[0].Status)
	// Operator actions: retry both dead letters, cancel one of them, the
	// retrying job and the snoozed one, then retention.
	for _, id := range []uuid.UUID{jobs[2].ID, jobs[3].ID} {
		_, err = store.Retry(ctx, id)
		require.NoError(t, err)
	}
	for _, id := range []uuid.UUID{jobs[1].ID, jobs[3].ID, jobs[4].ID} {
		_, err = store.Cancel(ctx, id)
		require.NoError(t, err)
	}
	_, err = store.Retry(ctx, jobs[3].ID)
	require.NoError(t, err)
	_, err = store.Cancel(ctx, jobs[3].ID)
	require.NoError(t, err)
	for _, s := range []pulsetype.Status{pulsetype.StatusCompleted, pulsetype.StatusCanceled} {
		_, err = store.DeleteFinished(ctx, s, 0, 100)
		require.NoError(t, err)
	}
	require.Len(t, remaining(t, pool), 1, "only the PENDING retried job is left")
	require.Zero(t, guardCalls(), "a legal statement called a guard function")

	// The counter counts: TRUNCATE with only finished jobs left calls
	// jobs_guard_truncate, which returns without refusing.
	_, err = store.Cancel(ctx, jobs[2].ID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `TRUNCATE jobs, job_uniques, job_dependencies, job_replacements`)
	require.NoError(t, err)
	require.EqualValues(t, 1, guardCalls())
}

// TestSchemaReadsRenderEveryAdmittedRow: whatever the schema admits, Get
// and List read without error — no started_at, an empty history, a history
// with entries pulse did not write, timestamps at the ends of their range.
func TestSchemaReadsRenderEveryAdmittedRow(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	fresh := jobstoretest.MustCreate(t, pool, pendingJob)
	odd := jobstoretest.MustCreate(t, pool, jobstoretest.Spec{Status: pulsetype.StatusRetrying, Worker: "w", FailureError: "boom"})
	_, err := pool.Exec(ctx, `UPDATE jobs SET errors = errors || '[1, "text", null, {"attempt": 1.5, "error": "half"}, {"at": "yesterday"}, {"error": 7}, {"attempt": 2, "error": "x", "worker": "w", "at": "2026-01-02T03:04:05Z", "extra": true}]' WHERE id = $1`, odd)
	require.NoError(t, err)
	var extreme uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO jobs (id, topic, submitted_at, next_run_at)
		VALUES (gen_random_uuid(), 'test.topic', '4713-01-01 00:00:00+00 BC', '294276-12-31 23:59:59.999999+00') RETURNING id`).Scan(&extreme))

	job, err := store.Get(ctx, fresh)
	require.NoError(t, err)
	require.Nil(t, job.StartedAt)
	require.Nil(t, job.FinishedAt)
	require.Nil(t, job.LeaseUntil)
	require.Empty(t, job.Errors)
	require.Empty(t, job.LockedBy)

	job, err = store.Get(ctx, odd)
	require.NoError(t, err)
	require.Len(t, job.Errors, 8)
	require.Equal(t, jobstore.AttemptError{Attempt: 1, Error: "boom", Worker: "w", At: job.Errors[0].At}, job.Errors[0])
	require.Equal(t, "1", job.Errors[1].Error)
	require.Equal(t, `"text"`, job.Errors[2].Error)
	require.Equal(t, jobstore.AttemptError{}, job.Errors[3])
	require.Equal(t, `{"error": "half", "attempt": 1.5}`, job.Errors[4].Error, "an entry that does not fit shows its JSON")
	require.Equal(t, `{"at": "yesterday"}`, job.Errors[5].Error)
	require.Equal(t, `{"error": 7}`, job.Errors[6].Error)
	require.Equal(t, jobstore.AttemptError{Attempt: 2, Error: "x", Worker: "w", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, job.Errors[7])

	job, err = store.Get(ctx, extreme)
	require.NoError(t, err)
	require.Equal(t, -4712, job.SubmittedAt.UTC().Year())
	require.Equal(t, 294276, job.NextRunAt.UTC().Year())

	list, err := store.List(ctx, jobstore.ListFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 3)
}

// guardCallCounter opens a one-connection pool whose backend counts
// PL/pgSQL calls (track_functions = pl), and returns it with a function
// that reports how many calls of the jobs_guard_* functions that backend
// made so far. track_functions is a superuser setting: against a
// PULSE_TEST_DATABASE_URL of another role the test fails saying so,
// unless the developer listed superuser in PULSE_TEST_SKIP_TOOLS.
func guardCallCounter(t *testing.T) (*pgxpool.Pool, func() int64) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1 // one backend: its counters are the ones flushed below
	cfg.ConnConfig.RuntimeParams["track_functions"] = "pl"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		msg := fmt.Sprintf("cannot count function calls (track_functions needs a superuser): %v", err)
		if testtool.Skipped("superuser") {
			t.Skip(msg + "; skipped because " + testtool.EnvSkip + " lists superuser")
		}
		t.Fatal(msg + "; test as a superuser, or set " + testtool.EnvSkip + "=superuser")
	}
	return pool, func() int64 {
		t.Helper()
		_, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname LIKE 'jobs\_guard\_%'`).Scan(&n))
		return n
	}
}
