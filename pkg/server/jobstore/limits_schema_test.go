package jobstore_test

import (
	"context"
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
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/retrypolicy"
)

// TestSchemaLimitsAgreeWithPulsetype holds the schema to pulsetype's
// limits, the ones the SDK and jobspec check: for every bound the schema
// enforces, a row at the bound is stored and a row one past it is refused
// by Postgres itself, through raw SQL that no Go validation sees. A limit
// changed on one side only fails here.
func TestSchemaLimitsAgreeWithPulsetype(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()

	// micros spells a duration as the store sends it.
	micros := func(d time.Duration) int64 { return d.Microseconds() }
	const us = time.Microsecond

	// insertJob writes one job with one column set to v (the others take
	// their defaults) and returns Postgres's answer.
	insertJob := func(column string, v any) error {
		expr := "$2"
		switch column {
		case "timeout", "retry_base", "retry_fixed":
			expr = "$2::bigint * interval '1 microsecond'"
		}
		_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO jobs (id, topic, %s) VALUES ($1, 'limits', %s)`, column, expr),
			uuid.Must(uuid.NewV7()), v)
		return err
	}

	type bound struct {
		name       string
		constraint string
		at         []any // each is stored
		past       []any // each is refused by constraint
		insert     func(v any) error
	}
	jobColumn := func(column string) func(any) error {
		return func(v any) error { return insertJob(column, v) }
	}
	topicAt := strings.Repeat("t", pulsetype.MaxTopicLength)
	topicPast := topicAt + "t"
	bounds := []bound{
		{"jobs.priority", "jobs_priority_range",
			[]any{pulsetype.MinPriority, pulsetype.MaxPriority}, []any{pulsetype.MinPriority - 1, pulsetype.MaxPriority + 1},
			jobColumn("priority")},
		{"jobs.max_attempts", "jobs_max_attempts_range",
			[]any{pulsetype.MinMaxAttempts, pulsetype.MaxMaxAttempts}, []any{pulsetype.MinMaxAttempts - 1, pulsetype.MaxMaxAttempts + 1},
			jobColumn("max_attempts")},
		{"jobs.topic length", "jobs_topic_format",
			[]any{topicAt}, []any{topicPast}, func(v any) error {
				_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic) VALUES ($1, $2)`, uuid.Must(uuid.NewV7()), v)
				return err
			}},
		{"jobs.idempotency_key", "jobs_idempotency_key_length",
			[]any{"k", strings.Repeat("k", pulsetype.MaxIdempotencyKeyBytes)},
			[]any{"", strings.Repeat("k", pulsetype.MaxIdempotencyKeyBytes+1)},
			jobColumn("idempotency_key")},
		{"jobs.timeout", "jobs_timeout_range",
			[]any{micros(pulsetype.MinTimeout), micros(pulsetype.MaxTimeout)},
			[]any{micros(pulsetype.MinTimeout - us), micros(pulsetype.MaxTimeout + us)},
			jobColumn("timeout")},
		{"jobs.retry_base", "jobs_retry_range",
			[]any{micros(pulsetype.MinRetryDelay), micros(pulsetype.MaxRetryDelay)},
			[]any{micros(pulsetype.MinRetryDelay - us), micros(pulsetype.MaxRetryDelay + us)},
			jobColumn("retry_base")},
		{"jobs.retry_max", "jobs_retry_range",
			[]any{micros(pulsetype.MaxRetryDelay)}, []any{micros(pulsetype.MaxRetryDelay + us)},
			func(v any) error {
				_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic, retry_base, retry_max)
					VALUES ($1, 'limits', interval '1 millisecond', $2::bigint * interval '1 microsecond')`, uuid.Must(uuid.NewV7()), v)
				return err
			}},
		{"jobs.retry_fixed", "jobs_retry_range",
			[]any{micros(pulsetype.MinRetryDelay), micros(pulsetype.MaxRetryDelay)},
			[]any{micros(pulsetype.MinRetryDelay - us), micros(pulsetype.MaxRetryDelay + us)},
			jobColumn("retry_fixed")},
		{"job_uniques period", "job_uniques_period_range",
			[]any{micros(pulsetype.MinUniqueFor), micros(pulsetype.MaxUniqueFor)},
			[]any{micros(pulsetype.MinUniqueFor - us), micros(pulsetype.MaxUniqueFor + us)},
			func(v any) error {
				_, err := pool.Exec(ctx, `WITH j AS (INSERT INTO jobs (id, topic) VALUES ($1, 'limits') RETURNING id)
					INSERT INTO job_uniques (unique_key, job_id, since, expires_at)
					SELECT $2, j.id, now(), now() + $3::bigint * interval '1 microsecond' FROM j`,
					uuid.Must(uuid.NewV7()), uuid.New(), v)
				return err
			}},
		{"schedules.priority", "schedules_priority_range",
			[]any{pulsetype.MinPriority, pulsetype.MaxPriority}, []any{pulsetype.MinPriority - 1, pulsetype.MaxPriority + 1},
			scheduleColumn(ctx, pool, "priority")},
		{"schedules.max_attempts", "schedules_max_attempts_range",
			[]any{pulsetype.MinMaxAttempts, pulsetype.MaxMaxAttempts}, []any{pulsetype.MinMaxAttempts - 1, pulsetype.MaxMaxAttempts + 1},
			scheduleColumn(ctx, pool, "max_attempts")},
		{"schedules.topic", "schedules_topic_format",
			[]any{topicAt}, []any{topicPast}, func(v any) error {
				_, err := pool.Exec(ctx, `INSERT INTO schedules (id, name, topic, kind, expression) VALUES ($1, $2, $3, 'every', '1m')`,
					uuid.New(), "limits-"+uuid.NewString(), v)
				return err
			}},
		{"schedules.name", "schedules_name_format",
			[]any{topicAt}, []any{topicPast}, func(v any) error {
				_, err := pool.Exec(ctx, `INSERT INTO schedules (id, name, topic, kind, expression) VALUES ($1, $2, 'limits', 'every', '1m')`,
					uuid.New(), v)
				return err
			}},
		{"topic_limits.max_running", "topic_limits_max_running_range",
			[]any{0, pulsetype.MaxTopicLimit}, []any{-1, pulsetype.MaxTopicLimit + 1},
			func(v any) error {
				_, err := pool.Exec(ctx, `INSERT INTO topic_limits (topic, max_running, updated_by) VALUES ($1, $2, 'limits')`,
					"limit-"+uuid.NewString(), v)
				return err
			}},
		{"topic_limits.topic", "topic_limits_topic_format",
			[]any{topicAt}, []any{topicPast}, func(v any) error {
				_, err := pool.Exec(ctx, `INSERT INTO topic_limits (topic, max_running, updated_by) VALUES ($1, 1, 'limits')`, v)
				return err
			}},
		{"dispatch_control.reason", "dispatch_control_reason_length",
			// Characters, not bytes: 'é' is two bytes.
			[]any{strings.Repeat("é", pulsetype.MaxPauseReasonChars)},
			[]any{strings.Repeat("é", pulsetype.MaxPauseReasonChars+1)},
			func(v any) error {
				_, err := pool.Exec(ctx, `INSERT INTO dispatch_control (scope, paused, reason, actor, paused_at)
					VALUES ($1, true, $2, 'limits', now())`, "scope-"+uuid.NewString(), v)
				return err
			}},
		{"dispatch_control.scope", "dispatch_control_scope_format",
			[]any{topicAt}, []any{topicPast}, func(v any) error {
				_, err := pool.Exec(ctx, `INSERT INTO dispatch_control (scope) VALUES ($1)`, v)
				return err
			}},
		// The fleet's own settings, held to the bounds their packages
		// declare.
		{"job_throughput.writer", "job_throughput_writer",
			[]any{strings.Repeat("é", jobstore.MaxWriterLength)}, []any{"", strings.Repeat("é", jobstore.MaxWriterLength+1)},
			func(v any) error {
				_, err := pool.Exec(ctx, `INSERT INTO job_throughput (bucket, topic, writer) VALUES (date_trunc('minute', now(), 'UTC'), 'limits', $1)`, v)
				return err
			}},
		{"retry_policy.backoff_unit", "retry_policy_unit_range",
			[]any{int64(0), micros(retrypolicy.MaxUnit)}, []any{int64(-1), micros(retrypolicy.MaxUnit + us)},
			func(v any) error {
				return rolledBack(ctx, pool, `UPDATE retry_policy SET backoff_unit = $1::bigint * interval '1 microsecond',
					backoff_max = interval '30 days'`, v)
			}},
		{"retry_policy.backoff_max", "retry_policy_max_range",
			[]any{micros(retrypolicy.MaxDelay)}, []any{micros(retrypolicy.MaxDelay + us)},
			func(v any) error {
				return rolledBack(ctx, pool, `UPDATE retry_policy SET backoff_max = $1::bigint * interval '1 microsecond'`, v)
			}},
	}
	for _, b := range bounds {
		t.Run(b.name, func(t *testing.T) {
			for _, v := range b.at {
				require.NoError(t, b.insert(v), "%s: %s at the Go limit (%v) must be stored", b.name, b.constraint, shorten(v))
			}
			for _, v := range b.past {
				requireRefusedBy(t, b.insert(v), b.constraint, shorten(v))
			}
		})
	}

	// The defaults a job and a schedule get without a value are
	// pulsetype's defaults.
	t.Run("defaults", func(t *testing.T) {
		var prio, attempts int
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO jobs (id, topic) VALUES ($1, 'limits') RETURNING priority, max_attempts`,
			uuid.Must(uuid.NewV7())).Scan(&prio, &attempts))
		require.Equal(t, pulsetype.DefaultPriority, prio, "jobs.priority's default")
		require.Equal(t, pulsetype.DefaultMaxAttempts, attempts, "jobs.max_attempts's default")
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO schedules (id, name, topic, kind, expression)
			VALUES ($1, $2, 'limits', 'every', '1m') RETURNING priority, max_attempts`, uuid.New(), "defaults").Scan(&prio, &attempts))
		require.Equal(t, pulsetype.DefaultPriority, prio, "schedules.priority's default")
		require.Equal(t, pulsetype.DefaultMaxAttempts, attempts, "schedules.max_attempts's default")
	})

	// The topic charset: every name Go accepts is stored and every name it
	// refuses is refused, in each table that holds a topic.
	t.Run("topic charset", func(t *testing.T) {
		names := []string{
			"a", "Z", "9", "a.b_c:d-e", "0-", "orders:v2.created",
			".a", "_a", ":a", "-a", "", " a", "a b", "a/b", "a*", "é", "aé", "a\u00a0", "ａ", "a\tb", "a\nb", "a'b", `a"b`,
			"a%", "a+b", "a\u200b", topicAt, topicPast, "é" + topicAt[2:],
		}
		for _, name := range names {
			goOK := pulsetype.ValidTopic(name)
			_, jobErr := pool.Exec(ctx, `INSERT INTO jobs (id, topic) VALUES ($1, $2)`, uuid.Must(uuid.NewV7()), name)
			_, limErr := pool.Exec(ctx, `INSERT INTO topic_limits (topic, max_running, updated_by) VALUES ($1, 1, 'limits')
				ON CONFLICT (topic) DO NOTHING`, name)
			_, schedErr := pool.Exec(ctx, `INSERT INTO schedules (id, name, topic, kind, expression) VALUES ($1, $2, $3, 'every', '1m')`,
				uuid.New(), "charset-"+uuid.NewString(), name)
			if goOK {
				require.NoError(t, jobErr, "jobs must store topic %q, which Go accepts", name)
				require.NoError(t, limErr, "topic_limits must store topic %q, which Go accepts", name)
				require.NoError(t, schedErr, "schedules must store topic %q, which Go accepts", name)
				continue
			}
			requireRefusedBy(t, jobErr, "jobs_topic_format", name)
			requireRefusedBy(t, limErr, "topic_limits_topic_format", name)
			requireRefusedBy(t, schedErr, "schedules_topic_format", name)
		}
	})
}

// rolledBack runs one statement in a transaction it rolls back, for the
// tables with one row.
func rolledBack(ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing of it is kept
	_, err = tx.Exec(ctx, sql, args...)
	return err
}

// scheduleColumn inserts a schedule with column set to v.
func scheduleColumn(ctx context.Context, pool *pgxpool.Pool, column string) func(any) error {
	return func(v any) error {
		_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO schedules (id, name, topic, kind, expression, %s)
			VALUES ($1, $2, 'limits', 'every', '1m', $3)`, column), uuid.New(), "limits-"+uuid.NewString(), v)
		return err
	}
}

// requireRefusedBy: Postgres refused the statement by constraint (a CHECK
// or a guard trigger raising as one).
func requireRefusedBy(t *testing.T, err error, constraint string, value any) {
	t.Helper()
	require.Error(t, err, "Postgres must refuse %v (%s)", value, constraint)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a Postgres error for %v, got %v", value, err)
	require.Equal(t, "23514", pgErr.Code, "want a check_violation for %v: %s", value, pgErr.Message)
	require.Equal(t, constraint, pgErr.ConstraintName, "%v refused by the wrong rule: %s", value, pgErr.Message)
}

// shorten keeps a long value readable in a failure message.
func shorten(v any) any {
	if s, ok := v.(string); ok && len(s) > 24 {
		return fmt.Sprintf("%q… (%d bytes)", s[:12], len(s))
	}
	return v
}
