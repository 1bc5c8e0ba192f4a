package jobstore_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// TestSchemaGuardsStayOffTheHotPath: the schema (ADR-0020; migration 00013
// before the baseline fold) takes the
// schema's guards off the claim and report path without dropping a rule.
// No BEFORE UPDATE or BEFORE DELETE row trigger is left on jobs (any one
// makes Postgres lock every row it updates or deletes, a WAL record each);
// the guards run AFTER. The six CHECKs on columns no UPDATE can change are
// gone; jobs_guard_spec refuses a bad value at birth exactly as they did,
// and jobs_guard_identity refuses any later change of those columns.
// TestSchemaLegalPathsNeverEnterPLpgSQL shows the legal paths still call
// no guard function.
func TestSchemaGuardsStayOffTheHotPath(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	t.Run("NoRowTriggerRunsBeforeAnUpdateOrADelete", func(t *testing.T) {
		// Internal and disabled triggers count too: Postgres locks the row
		// for any BEFORE row trigger in the table's trigger list. tgtype
		// bits: 1 row, 2 before, 8 delete, 16 update.
		rows, err := pool.Query(ctx, `SELECT tgname FROM pg_trigger
			WHERE tgrelid = 'jobs'::regclass AND tgtype & 1 <> 0 AND tgtype & 2 <> 0 AND tgtype & (8 | 16) <> 0`)
		require.NoError(t, err)
		before, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Empty(t, before, "a BEFORE UPDATE or BEFORE DELETE row trigger brings back a tuple lock per row")

		// The guards are still there, as AFTER row triggers.
		rows, err = pool.Query(ctx, `SELECT tgname FROM pg_trigger
			WHERE tgrelid = 'jobs'::regclass AND tgenabled <> 'D' AND tgtype & 1 <> 0 AND tgtype & 2 = 0
			  AND tgtype & (8 | 16) <> 0`)
		require.NoError(t, err)
		after, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, guard := range []string{"jobs_guard_transition", "jobs_guard_identity", "jobs_guard_errors", "jobs_guard_delete"} {
			require.Contains(t, after, guard)
		}
	})

	t.Run("NoCheckOnAColumnThatCannotChange", func(t *testing.T) {
		rows, err := pool.Query(ctx, `SELECT conname FROM pg_constraint WHERE conrelid = 'jobs'::regclass AND contype = 'c'`)
		require.NoError(t, err)
		checks, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, moved := range specRules {
			require.NotContains(t, checks, moved, "Postgres would evaluate it on every UPDATE")
		}
		// priority and max_attempts may change after submit (reprioritize,
		// raise the budget), so their ranges stay CHECKs.
		require.Contains(t, checks, "jobs_priority_range")
		require.Contains(t, checks, "jobs_max_attempts_range")
	})

	var schema string
	require.NoError(t, pool.QueryRow(ctx, `SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'jobs'::regclass`).Scan(&schema))
	// requireCheckViolation: refused as Postgres refused a CHECK of that
	// name, down to the message.
	requireCheckViolation := func(t *testing.T, err error, rule string) {
		t.Helper()
		requireConstraint(t, err, rule)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr))
		require.Equal(t, `new row for relation "jobs" violates check constraint "`+rule+`"`, pgErr.Message)
		require.Equal(t, "jobs", pgErr.TableName)
		require.Equal(t, schema, pgErr.SchemaName)
	}

	t.Run("ABadSpecIsRefusedAtBirthAsByTheCheck", func(t *testing.T) {
		before := countJobs(t, pool)
		for _, tc := range []struct{ name, columns, values, rule string }{
			{"ArgsAnArray", `topic, args`, `'t', '[1, 2]'`, "jobs_args_object"},
			{"ArgsAString", `topic, args`, `'t', '"text"'`, "jobs_args_object"},
			{"ArgsJSONNull", `topic, args`, `'t', 'null'`, "jobs_args_object"},
			{"AnEmptyIdempotencyKey", `topic, idempotency_key`, `'t', ''`, "jobs_idempotency_key_length"},
			{"ALongIdempotencyKey", `topic, idempotency_key`, `'t', repeat('k', 256)`, "jobs_idempotency_key_length"},
			{"FixedAndExponential", `topic, retry_base, retry_fixed`, `'t', '1 second', '1 second'`, "jobs_retry_form"},
			{"AMaxWithoutABase", `topic, retry_max`, `'t', '1 minute'`, "jobs_retry_form"},
			{"AMaxBelowItsBase", `topic, retry_base, retry_max`, `'t', '1 minute', '1 second'`, "jobs_retry_form"},
			{"ABaseUnderAMillisecond", `topic, retry_base`, `'t', '500 microseconds'`, "jobs_retry_range"},
			{"AMaxPast366Days", `topic, retry_base, retry_max`, `'t', '1 second', '367 days'`, "jobs_retry_range"},
			{"AFixedDelayPast366Days", `topic, retry_fixed`, `'t', '367 days'`, "jobs_retry_range"},
			{"ATimeoutUnderASecond", `topic, timeout`, `'t', '999 milliseconds'`, "jobs_timeout_range"},
			{"ATimeoutPastADay", `topic, timeout`, `'t', '24 hours 1 second'`, "jobs_timeout_range"},
			{"ATopicWithASpace", `topic`, `'has space'`, "jobs_topic_format"},
			{"ATopicOf129Characters", `topic`, `repeat('a', 129)`, "jobs_topic_format"},
			// Several rules broken: the first in name order, the order in
			// which Postgres checked the CHECKs.
			{"ArgsAndTopic", `topic, args`, `'has space', '[]'`, "jobs_args_object"},
			{"IdempotencyKeyAndRetry", `topic, idempotency_key, retry_max`, `'t', '', '1 second'`, "jobs_idempotency_key_length"},
			{"RetryFormAndRange", `topic, retry_base, retry_fixed`, `'t', '1 second', '0 seconds'`, "jobs_retry_form"},
			{"TimeoutAndTopic", `topic, timeout`, `'has space', '0 seconds'`, "jobs_timeout_range"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := pool.Exec(ctx, `INSERT INTO jobs (id, `+tc.columns+`) VALUES (gen_random_uuid(), `+tc.values+`)`)
				requireCheckViolation(t, err, tc.rule)
			})
		}
		// The birth rule runs first, as it did before the CHECKs.
		_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic, status, finished_at) VALUES (gen_random_uuid(), 'has space', 'CANCELED', now())`)
		requireConstraint(t, err, "jobs_born_pending")
		require.Equal(t, before, countJobs(t, pool), "a refused insert writes nothing")
	})

	t.Run("EveryInsertPathIsGuarded", func(t *testing.T) {
		before := countJobs(t, pool)
		_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic, timeout) VALUES (gen_random_uuid(), 't', '2 days')
			ON CONFLICT DO NOTHING`)
		requireCheckViolation(t, err, "jobs_timeout_range")
		_, err = pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, []string{"id", "topic"},
			pgx.CopyFromRows([][]any{{"00000000-0000-0000-0000-0000000000c0", "has space"}}))
		requireCheckViolation(t, err, "jobs_topic_format")
		require.Equal(t, before, countJobs(t, pool))
	})

	t.Run("ASpecAtTheEdgesIsBorn", func(t *testing.T) {
		for _, values := range []string{
			`repeat('a', 128), '{"n": 1}', repeat('k', 255), '1 millisecond', '366 days', NULL, '1 second'`,
			`'a', '{}', 'k', NULL, NULL, '366 days', '24 hours'`,
			`'a.b_c:d-e', '{}', NULL, '366 days', NULL, NULL, NULL`,
		} {
			_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic, args, idempotency_key, retry_base, retry_max, retry_fixed, timeout)
				VALUES (gen_random_uuid(), `+values+`)`)
			require.NoError(t, err, values)
		}
	})

	t.Run("ASpecCannotChangeAfterBirth", func(t *testing.T) {
		// Each change would have broken one of the old CHECKs; the identity
		// guard refuses it first of all as a change.
		for _, tc := range []struct{ column, set string }{
			{"topic", `topic = 'has space'`},
			{"args", `args = '[1, 2]'`},
			{"idempotency_key", `idempotency_key = ''`},
			{"retry_base", `retry_base = '0 seconds'`},
			{"retry_max", `retry_max = '1 millisecond'`},
			{"retry_fixed", `retry_fixed = '1 second'`},
			{"timeout", `timeout = '48 hours'`},
		} {
			t.Run(tc.column, func(t *testing.T) {
				var id, before string
				require.NoError(t, pool.QueryRow(ctx, `INSERT INTO jobs (id, topic, args, idempotency_key, retry_base, retry_max, timeout)
					VALUES (gen_random_uuid(), 'spec.frozen', '{"n": 1}', 'key-' || $1, '1 second', '1 minute', '30 seconds')
					RETURNING id::text, row_to_json(jobs)::text`, tc.column).Scan(&id, &before))
				_, err := pool.Exec(ctx, `UPDATE jobs SET `+tc.set+` WHERE id = $1`, id)
				requireConstraint(t, err, "jobs_identity_immutable")
				var pgErr *pgconn.PgError
				require.True(t, errors.As(err, &pgErr))
				require.Equal(t, tc.column, pgErr.ColumnName)
				var after string
				require.NoError(t, pool.QueryRow(ctx, `SELECT row_to_json(j)::text FROM jobs j WHERE id = $1`, id).Scan(&after))
				require.Equal(t, before, after, "a refused statement changes nothing")
			})
		}
	})
}

// specRules are the rules of jobs_guard_spec, CHECK constraints until
// migration 00013 (now folded into the baseline).
var specRules = []string{
	"jobs_args_object", "jobs_idempotency_key_length", "jobs_retry_form",
	"jobs_retry_range", "jobs_timeout_range", "jobs_topic_format",
}
