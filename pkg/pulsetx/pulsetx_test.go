package pulsetx_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetx"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

func TestMain(m *testing.M) {
	os.Exit(pgtest.MainLeakChecked(m))
}

var ctx = context.Background()

type order struct {
	ID    int    `json:"id"`
	Email string `json:"email"`
}

func jobCount(t *testing.T, pool *pgxpool.Pool, topic string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = $1`, topic).Scan(&n))
	return n
}

func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t)
	_, err := pool.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, email text NOT NULL)`)
	require.NoError(t, err)
	return pool
}

// The job exists if and only if the application's transaction commits,
// together with the application's own rows; the gateways' NOTIFY arrives
// at the commit, not before.
func TestEnqueueIsPartOfTheTransaction(t *testing.T) {
	t.Parallel()
	pool := setup(t)

	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, `LISTEN `+jobstore.ReadyChannel)
	require.NoError(t, err)
	notified := func(wait time.Duration) bool {
		c, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		_, err := listener.Conn().WaitForNotification(c)
		return err == nil
	}

	// Rolled back: neither the order nor the job.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO orders VALUES (1, 'a@example.com')`)
	require.NoError(t, err)
	s, err := pulsetx.Enqueue(ctx, tx, "order.confirm", order{1, "a@example.com"}, pulse.UniqueFor(time.Hour))
	require.NoError(t, err)
	require.False(t, s.Duplicate)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, jobCount(t, pool, "order.confirm"))
	require.False(t, notified(200*time.Millisecond), "a rolled-back enqueue woke the gateways")

	// Committed: both, woken at the commit.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO orders VALUES (1, 'a@example.com')`)
	require.NoError(t, err)
	s, err = pulsetx.Enqueue(ctx, tx, "order.confirm", order{1, "a@example.com"},
		pulse.UniqueFor(time.Hour), pulse.Timeout(30*time.Second), pulse.Priority(8), pulse.MaxAttempts(4),
		pulse.ExponentialBackoff(2*time.Second, 10*time.Minute))
	require.NoError(t, err)
	require.False(t, notified(200*time.Millisecond), "woken before the commit")
	require.Zero(t, jobCount(t, pool, "order.confirm"), "visible before the commit")
	// Enqueued again in the same transaction: the same job.
	again, err := pulsetx.Enqueue(ctx, tx, "order.confirm", order{1, "a@example.com"}, pulse.UniqueFor(time.Hour))
	require.NoError(t, err)
	require.Equal(t, pulse.Submitted{ID: s.ID, Duplicate: true}, again)
	require.NoError(t, tx.Commit(ctx))
	require.True(t, notified(5*time.Second), "no NOTIFY at the commit")

	var topic, args string
	var prio, maxAttempts int
	var timeout, retryBase, retryMax time.Duration
	var retryFixed *time.Duration
	require.NoError(t, pool.QueryRow(ctx, `SELECT topic, args::text, priority, max_attempts, timeout, retry_base, retry_max, retry_fixed
		FROM jobs WHERE id = $1`, s.ID).
		Scan(&topic, &args, &prio, &maxAttempts, &timeout, &retryBase, &retryMax, &retryFixed))
	require.Equal(t, "order.confirm", topic)
	require.JSONEq(t, `{"id":1,"email":"a@example.com"}`, args)
	require.Equal(t, 8, prio)
	require.Equal(t, 4, maxAttempts)
	require.Equal(t, 30*time.Second, timeout)
	require.Equal(t, []time.Duration{2 * time.Second, 10 * time.Minute}, []time.Duration{retryBase, retryMax})
	require.Nil(t, retryFixed)
}

// database/sql, through pgx's driver: the same, with a *sql.Tx.
func TestEnqueueSQL(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = pulsetx.EnqueueSQL(ctx, tx, "order.sql", map[string]int{"id": 2})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	require.Zero(t, jobCount(t, pool, "order.sql"))

	tx, err = db.BeginTx(ctx, &sql.TxOptions{})
	require.NoError(t, err)
	out, err := pulsetx.Enqueuer{}.EnqueueManySQL(ctx, tx, []pulse.JobRequest{
		{Topic: "order.sql", Args: map[string]int{"id": 2}, Options: []pulse.EnqueueOption{pulse.IdempotencyKey("order-2")}},
		{Topic: "order.sql", Args: map[string]int{"id": 3}, Options: []pulse.EnqueueOption{pulse.IdempotencyKey("order-2")}},
		{Topic: "order.sql", Args: []byte(`{"id": 4}`), Options: []pulse.EnqueueOption{pulse.Delay(time.Hour)}},
	})
	require.NoError(t, err)
	require.False(t, out[0].Duplicate)
	require.Equal(t, pulse.Submitted{ID: out[0].ID, Duplicate: true}, out[1])
	require.NoError(t, tx.Commit())
	require.Equal(t, 2, jobCount(t, pool, "order.sql"))
}

// A job validation refuses fails before any statement, naming its field,
// and leaves the transaction usable; in a batch, none is enqueued.
func TestEnqueueRefusesWhatControlAPIRefuses(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back by the test's end

	for _, tc := range []struct {
		topic string
		args  any
		opts  []pulse.EnqueueOption
		field string
	}{
		{"bad topic!", nil, nil, "topic"},
		{"t", []byte(`{"a":"\u0000"}`), nil, "args"},
		{"t", []byte(`{"a":1e1000000}`), nil, "args"},
		{"t", []byte(`[1]`), nil, "args"},
		// The SDK's own checks refuse these before jobspec sees them.
		{"t", nil, []pulse.EnqueueOption{pulse.IdempotencyKey("k\x00")}, "idempotency key contains a NUL"},
		{"t", nil, []pulse.EnqueueOption{pulse.IdempotencyKey("k\xff")}, "idempotency key is not valid UTF-8"},
		{"t", nil, []pulse.EnqueueOption{pulse.RunAt(time.Date(2, 1, 1, 0, 0, 0, 0, time.UTC))}, "run_at"},
	} {
		_, err := pulsetx.Enqueue(ctx, tx, tc.topic, tc.args, tc.opts...)
		require.ErrorIs(t, err, pulsetx.ErrInvalidJob, "%+v", tc)
		require.ErrorContains(t, err, tc.field)
	}
	// Out-of-range options are refused by the SDK's own checks.
	_, err = pulsetx.Enqueue(ctx, tx, "t", nil, pulse.Timeout(25*time.Hour))
	require.ErrorIs(t, err, pulsetx.ErrInvalidJob)
	require.ErrorContains(t, err, "timeout")
	_, err = pulsetx.Enqueue(ctx, tx, "t", nil, pulse.ExponentialBackoff(time.Hour, time.Minute))
	require.ErrorIs(t, err, pulsetx.ErrInvalidJob)
	require.ErrorContains(t, err, "backoff max")

	_, err = pulsetx.Enqueuer{}.EnqueueMany(ctx, tx, []pulse.JobRequest{{Topic: "t"}, {Topic: "t", Args: []byte(`{"x":"\u0000"}`)}})
	require.ErrorIs(t, err, pulsetx.ErrInvalidJob)
	require.ErrorContains(t, err, "jobs[1].args")

	// Args over the configured limit.
	_, err = pulsetx.Enqueuer{MaxArgsBytes: 16}.Enqueue(ctx, tx, "t", map[string]string{"long": "0123456789abcdef"})
	require.ErrorIs(t, err, pulsetx.ErrInvalidJob)

	// The transaction still works, and nothing was written.
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n))
	require.Zero(t, n)
	_, err = pulsetx.Enqueue(ctx, tx, "t", nil)
	require.NoError(t, err)
}

// A transaction in which the job is refused by the schema after all (a
// rule validation does not know, here a CHECK added for the test) fails
// with the field named, and is aborted like any failed statement.
func TestEnqueueSchemaRefusalAbortsTheTransaction(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	_, err := pool.Exec(ctx, `ALTER TABLE jobs ADD CONSTRAINT jobs_topic_format_strict CHECK (topic <> 'forbidden')`)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // aborted
	_, err = pulsetx.Enqueue(ctx, tx, "forbidden", nil)
	require.Error(t, err)
	_, err = tx.Exec(ctx, `SELECT 1`)
	var pgErr interface{ SQLState() string }
	require.True(t, errors.As(err, &pgErr) && pgErr.SQLState() == "25P02", "%v", err)
}

var _ pgx.Tx // the pgx variant takes a pgx.Tx

// An application's role with exactly the grants docs/transactional-enqueue.md
// lists (INSERT and SELECT on jobs; SELECT on topic_limits; INSERT, UPDATE
// and SELECT on job_uniques) enqueues plain and unique jobs; and it cannot make a unique
// key name a job that does not exist, not even with a temporary table of
// its own called jobs in front of the real one (the key's check runs with
// the schema owner's rights and search path, ADR-0068).
func TestEnqueueWithTheDocumentedGrants(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	role := fmt.Sprintf("pulsetx_app_%d", rand.Uint32())
	for _, q := range []string{
		`CREATE ROLE ` + role + ` NOLOGIN`,
		`GRANT INSERT, SELECT ON jobs TO ` + role,
		`GRANT INSERT, UPDATE, SELECT ON job_uniques TO ` + role,
		`GRANT SELECT ON topic_limits TO ` + role,
		`GRANT INSERT, SELECT ON orders TO ` + role,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		for _, q := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			_, err := pool.Exec(context.Background(), q)
			require.NoError(t, err, q)
		}
	})
	asApp := func(t *testing.T) pgx.Tx {
		t.Helper()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		_, err = tx.Exec(ctx, `SET LOCAL ROLE `+role)
		require.NoError(t, err)
		return tx
	}

	t.Run("EnqueuesPlainAndUniqueJobs", func(t *testing.T) {
		tx := asApp(t)
		_, err := tx.Exec(ctx, `INSERT INTO orders VALUES (7, 'g@example.com')`)
		require.NoError(t, err)
		plain, err := pulsetx.Enqueue(ctx, tx, "grants.plain", order{7, "g@example.com"})
		require.NoError(t, err)
		require.False(t, plain.Duplicate)
		first, err := pulsetx.Enqueue(ctx, tx, "grants.unique", order{7, "g@example.com"}, pulse.UniqueFor(time.Hour))
		require.NoError(t, err)
		again, err := pulsetx.Enqueue(ctx, tx, "grants.unique", order{7, "g@example.com"}, pulse.UniqueFor(time.Hour))
		require.NoError(t, err)
		require.Equal(t, pulse.Submitted{ID: first.ID, Duplicate: true}, again)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 1, jobCount(t, pool, "grants.plain"))
		require.Equal(t, 1, jobCount(t, pool, "grants.unique"))
	})

	t.Run("CannotMakeAKeyNameAJobThatDoesNotExist", func(t *testing.T) {
		tx := asApp(t)
		ghost := uuid.Must(uuid.NewV7())
		_, err := tx.Exec(ctx, `CREATE TEMP TABLE jobs (id uuid PRIMARY KEY)`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO pg_temp.jobs VALUES ($1)`, ghost)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO job_uniques (unique_key, job_id, expires_at)
			VALUES (gen_random_uuid(), $1, now() + interval '1 hour')`, ghost)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "23503", pgErr.Code, pgErr.Message)
		require.Equal(t, "job_uniques_job_id_fkey", pgErr.ConstraintName)
	})
}
