package jobstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// allowed is DESIGN.md's transition table.
var allowed = map[[2]jobstore.Status]bool{
	{jobstore.StatusPending, jobstore.StatusRunning}:      true,
	{jobstore.StatusRetrying, jobstore.StatusRunning}:     true,
	{jobstore.StatusRunning, jobstore.StatusCompleted}:    true,
	{jobstore.StatusRunning, jobstore.StatusRetrying}:     true,
	{jobstore.StatusRunning, jobstore.StatusDeadLettered}: true,
	{jobstore.StatusPending, jobstore.StatusCanceled}:     true,
	{jobstore.StatusRetrying, jobstore.StatusCanceled}:    true,
	{jobstore.StatusRunning, jobstore.StatusCanceled}:     true,
	{jobstore.StatusDeadLettered, jobstore.StatusPending}: true,
	{jobstore.StatusCanceled, jobstore.StatusPending}:     true,
}

// transitionSQL moves a row to `to` while keeping every CHECK constraint
// satisfied, so only the transition trigger can object.
func transitionSQL(to jobstore.Status) string {
	switch to {
	case jobstore.StatusRunning:
		return `UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'w',
			lease_until = now() + interval '1 minute', started_at = now(), finished_at = NULL WHERE id = $1`
	case jobstore.StatusPending:
		return `UPDATE jobs SET status = 'PENDING', attempts = 0, lease_until = NULL, finished_at = NULL WHERE id = $1`
	case jobstore.StatusRetrying:
		return `UPDATE jobs SET status = 'RETRYING', lease_until = NULL, finished_at = NULL WHERE id = $1`
	default: // terminal
		return fmt.Sprintf(`UPDATE jobs SET status = '%s', lease_until = NULL, finished_at = now() WHERE id = $1`, to)
	}
}

func TestSchemaTransitions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()

	for _, from := range jobstore.Statuses {
		for _, to := range jobstore.Statuses {
			if from == to {
				continue
			}
			name := fmt.Sprintf("%s_to_%s", from, to)
			t.Run(name, func(t *testing.T) {
				id := insertRow(t, pool, rowOpts{Status: from, Attempts: 1})
				_, err := pool.Exec(ctx, transitionSQL(to), id)
				if allowed[[2]jobstore.Status{from, to}] {
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
	ctx := context.Background()

	cases := []struct {
		name       string
		from       jobstore.Status
		sql        string
		constraint string
	}{
		{"RunningWithoutLeaseIsRefused", jobstore.StatusPending,
			`UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'w', started_at = now() WHERE id = $1`,
			"jobs_running_is_leased"},
		{"RunningWithoutLockedByIsRefused", jobstore.StatusPending,
			`UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, lease_until = now(), started_at = now() WHERE id = $1`,
			"jobs_running_is_leased"},
		{"ClaimWithoutAttemptIncrementIsRefused", jobstore.StatusPending,
			`UPDATE jobs SET status = 'RUNNING', locked_by = 'w', lease_until = now(), started_at = now() WHERE id = $1`,
			"jobs_attempts_fence"},
		{"AttemptsAboveMaxAreRefused", jobstore.StatusRetrying,
			`UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'w', lease_until = now(), started_at = now() WHERE id = $1`,
			"jobs_attempts_within_max"},
		{"RewindingAttemptsIsRefused", jobstore.StatusRunning,
			`UPDATE jobs SET attempts = 0 WHERE id = $1`,
			"jobs_attempts_fence"},
		{"PriorityOutOfRangeIsRefused", jobstore.StatusPending,
			`UPDATE jobs SET priority = 11 WHERE id = $1`, "jobs_priority_range"},
		{"NegativePriorityIsRefused", jobstore.StatusPending,
			`UPDATE jobs SET priority = -1 WHERE id = $1`, "jobs_priority_range"},
		{"MaxAttemptsOutOfRangeIsRefused", jobstore.StatusPending,
			`UPDATE jobs SET max_attempts = 101 WHERE id = $1`, "jobs_max_attempts_range"},
		{"TerminalWithoutFinishedAtIsRefused", jobstore.StatusRunning,
			`UPDATE jobs SET status = 'COMPLETED', lease_until = NULL WHERE id = $1`, "jobs_finished_iff_terminal"},
		{"LeaveRunningKeepingLeaseIsRefused", jobstore.StatusRunning,
			`UPDATE jobs SET status = 'COMPLETED', finished_at = now() WHERE id = $1`, "jobs_running_is_leased"},
		{"CompletedIsFinal", jobstore.StatusCompleted,
			`UPDATE jobs SET priority = 1 WHERE id = $1`, "jobs_status_transition"},
		{"UnknownStatusIsRefused", jobstore.StatusPending,
			`INSERT INTO jobs (id, topic, status) SELECT gen_random_uuid(), 't', 'PAUSED' WHERE $1::uuid IS NOT NULL`, "jobs_status_known"},
		{"UnknownStatusUpdateIsRefused", jobstore.StatusPending,
			`UPDATE jobs SET status = 'PAUSED' WHERE id = $1`, "jobs_status_transition"},
		{"NonObjectArgsAreRefused", jobstore.StatusPending,
			`UPDATE jobs SET args = '[1,2]' WHERE id = $1`, "jobs_args_object"},
		{"BadTopicIsRefused", jobstore.StatusPending,
			`UPDATE jobs SET topic = 'has space' WHERE id = $1`, "jobs_topic_format"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := rowOpts{Status: tc.from, Attempts: 1}
			if tc.constraint == "jobs_attempts_within_max" {
				o.MaxAttempts = 1 // the next claim would be attempt 2 of 1
			}
			id := insertRow(t, pool, o)
			_, err := pool.Exec(ctx, tc.sql, id)
			requireConstraint(t, err, tc.constraint)
		})
	}

	t.Run("HeartbeatStyleUpdatesPass", func(t *testing.T) {
		id := insertRow(t, pool, rowOpts{Status: jobstore.StatusRunning})
		_, err := pool.Exec(ctx, `UPDATE jobs SET lease_until = now() + interval '5 minutes' WHERE id = $1`, id)
		require.NoError(t, err)
	})
}

func requireConstraint(t *testing.T, err error, constraint string) {
	t.Helper()
	require.Error(t, err, "Postgres must refuse this statement (%s)", constraint)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a Postgres error, got %v", err)
	require.Equal(t, constraint, pgErr.ConstraintName, "refused by the wrong rule: %s", pgErr.Message)
}

// TestSchemaTopicRuleMatchesValidator: jobs_topic_format (rewritten for
// speed in migration 00004) accepts exactly the topics the API validator
// accepts, at every edge of the rule.
func TestSchemaTopicRuleMatchesValidator(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()

	topics := []string{
		"a", "Z", "0", "email.send", "a.b_c:d-e", "0._:-",
		strings.Repeat("a", 127), strings.Repeat("a", 128), strings.Repeat("a", 129),
		"", ".leading-dot", "_x", "-x", ":x", "has space", "tab\tx", "trailing\n",
		"ünïcode", "a/b", "a*", strings.Repeat("é", 10),
	}
	for _, topic := range topics {
		_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic) VALUES (gen_random_uuid(), $1)`, topic)
		if jobspec.TopicPattern.MatchString(topic) {
			require.NoError(t, err, "topic %q passes the validator, so the schema must take it", topic)
		} else {
			requireConstraint(t, err, "jobs_topic_format")
		}
	}
}
