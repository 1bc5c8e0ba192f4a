package jobstore_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// insertCounter counts the INSERT INTO jobs statements a pool runs, on
// their own or in a pipelined batch.
type insertCounter struct{ n atomic.Int64 }

func (c *insertCounter) count(sql string) {
	if strings.HasPrefix(strings.TrimSpace(sql), "INSERT INTO jobs") {
		c.n.Add(1)
	}
}

func (c *insertCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL)
	return ctx
}

func (*insertCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (*insertCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *insertCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.count(d.SQL)
}

func (*insertCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// countedSetup is setup on a pool that counts its INSERT statements.
func countedSetup(t *testing.T) (*testBundle, *insertCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	counter := &insertCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &testBundle{pool: pool, store: newStore(t, pool)}, counter
}

func countJobs(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n))
	return n
}

// poisons are values validation would refuse (package storable), handed
// straight to the store to show what Postgres does with them in a batch.
var poisons = []struct {
	name  string
	field string
	apply func(*pulsetype.NewJob)
}{
	{"InvalidUTF8InArgs", "args", func(j *pulsetype.NewJob) { j.Args = []byte("{\"a\":\"\xff\"}") }},
	{"NULKeyInArgs", "args", func(j *pulsetype.NewJob) { j.Args = []byte(`{"\u0000":1}`) }},
	{"NULValueInArgs", "args", func(j *pulsetype.NewJob) { j.Args = []byte(`{"a":"x\u0000y"}`) }},
	{"NumberJsonbCannotHold", "args", func(j *pulsetype.NewJob) { j.Args = []byte(`{"a":1e1000000}`) }},
	{"LoneSurrogateInArgs", "args", func(j *pulsetype.NewJob) { j.Args = []byte(`{"a":"\ud800"}`) }},
	{"TimestampBeforePostgresRange", "run_at", func(j *pulsetype.NewJob) { j.RunAt = time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC) }},
	{"NULInIdempotencyKey", "idempotency_key", func(j *pulsetype.NewJob) { j.IdempotencyKey = "k\x00" }},
	{"InvalidUTF8InIdempotencyKey", "idempotency_key", func(j *pulsetype.NewJob) { j.IdempotencyKey = "k\xc3" }},
	{"InvalidUTF8InTopic", "topic", func(j *pulsetype.NewJob) { j.Topic = "t\xff" }},
}

// TestInsertEachIsolatesTheJobPostgresRefuses: a batch with one job whose
// value Postgres cannot store inserts every other job, and the culprit
// fails alone with InvalidArgument naming its field, with and without
// idempotency keys (the plain and the ON CONFLICT statement).
func TestInsertEachIsolatesTheJobPostgresRefuses(t *testing.T) {
	t.Parallel()
	for _, withKeys := range []bool{false, true} {
		for _, p := range poisons {
			name := p.name
			if withKeys {
				name += "/WithIdempotencyKeys"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b, counter := countedSetup(t)
				const n, culprit = 33, 21
				jobs := make([]pulsetype.NewJob, n)
				for i := range jobs {
					jobs[i] = newJob("isolate", 5)
					if withKeys {
						jobs[i].IdempotencyKey = "key-" + jobs[i].ID.String()
					}
				}
				if withKeys {
					jobs[3].IdempotencyKey = jobs[2].IdempotencyKey // a duplicate within the batch
				}
				p.apply(&jobs[culprit])

				res, errs := b.store.InsertEach(ctx, jobs)
				require.Len(t, errs, n)
				for i := range jobs {
					if i == culprit {
						require.ErrorIs(t, errs[i], apierr.ErrInvalidArgument, "%v", errs[i])
						require.Equal(t, p.field, apierr.FieldOf(errs[i]), "%v", errs[i])
						require.True(t, jobstore.IsDataError(errs[i]), "Postgres's refusal stays in the chain")
						continue
					}
					require.NoError(t, errs[i], "job %d", i)
				}
				want := n - 1
				if withKeys {
					require.Equal(t, pulsetype.Inserted{ID: jobs[2].ID, Duplicate: true}, res[3])
					want--
				}
				require.Equal(t, pulsetype.Inserted{ID: jobs[0].ID}, res[0])
				require.Equal(t, want, countJobs(t, b.pool))
				// One refused job among 33 costs a bisection: about 2·log2(33)
				// statements, never one per job.
				require.LessOrEqual(t, counter.n.Load(), int64(2*6+2))
			})
		}
	}
}

func TestInsertEachHappyPathIsOneStatement(t *testing.T) {
	t.Parallel()
	b, counter := countedSetup(t)
	jobs := make([]pulsetype.NewJob, 50)
	for i := range jobs {
		jobs[i] = newJob("happy", 5)
	}
	res, errs := b.store.InsertEach(ctx, jobs)
	require.Nil(t, errs)
	require.Len(t, res, 50)
	require.EqualValues(t, 1, counter.n.Load())
}

// TestInsertEachSplitsABatchACheckConstraintRefuses forces a data error
// that no validation knows about, a CHECK constraint added to this test's
// database, and shows the batch is split around the culprits only.
func TestInsertEachSplitsABatchACheckConstraintRefuses(t *testing.T) {
	t.Parallel()
	b, counter := countedSetup(t)
	_, err := b.pool.Exec(ctx, `ALTER TABLE jobs ADD CONSTRAINT jobs_args_no_poison CHECK (NOT args ? 'poison')`)
	require.NoError(t, err)
	jobs := make([]pulsetype.NewJob, 40)
	for i := range jobs {
		jobs[i] = newJob("check", 5)
	}
	jobs[0].Args = []byte(`{"poison":true}`)
	jobs[39].Args = []byte(`{"poison":1}`)
	res, errs := b.store.InsertEach(ctx, jobs)
	for i := range jobs {
		if i == 0 || i == 39 {
			require.ErrorIs(t, errs[i], apierr.ErrInvalidArgument)
			require.ErrorContains(t, errs[i], "jobs_args_no_poison")
			continue
		}
		require.NoError(t, errs[i])
		require.Equal(t, jobs[i].ID, res[i].ID)
	}
	require.Equal(t, 38, countJobs(t, b.pool))
	// Bisection: about 2·log2(40) statements per culprit, not one per job.
	require.LessOrEqual(t, counter.n.Load(), int64(1+2*2*6))
}

// Insert is all or nothing: a refused job fails the whole call, writes
// nothing, and is named by its place in the batch.
func TestInsertNamesTheRefusedJobAndWritesNothing(t *testing.T) {
	t.Parallel()
	for _, p := range poisons {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			jobs := make([]pulsetype.NewJob, 9)
			for i := range jobs {
				jobs[i] = newJob("all-or-nothing", 5)
			}
			p.apply(&jobs[6])
			_, err := b.store.Insert(ctx, jobs)
			var me *jobstore.MemberError
			require.ErrorAs(t, err, &me)
			require.Equal(t, 6, me.Index)
			require.ErrorIs(t, err, apierr.ErrInvalidArgument)
			require.Equal(t, p.field, apierr.FieldOf(err))
			require.Zero(t, countJobs(t, b.pool))
		})
	}
}

// TestSubmitInsertIsPlannedOnce: the INSERT of one job at a time (an idle
// fleet's submit) runs a generic plan made once per connection, not a
// plan made again at every execution, which Postgres's automatic choice
// kept doing because a custom plan reads the row count from the arrays.
// Both the plain insert and the one with conflict handling (an
// idempotency key) are counted in pg_prepared_statements of the pool's
// one backend.
func TestSubmitInsertIsPlannedOnce(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1 // one backend: its prepared statements are the ones read below
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := newStore(t, pool)

	const inserts = 12 // Postgres decides between custom and generic plans after five
	for i := range inserts {
		plain := newJob("planned.once", 5)
		keyed := newJob("planned.once", 5)
		keyed.IdempotencyKey = "key-" + strings.Repeat("k", i+1)
		_, err := store.Insert(ctx, []pulsetype.NewJob{plain})
		require.NoError(t, err)
		_, err = store.Insert(ctx, []pulsetype.NewJob{keyed})
		require.NoError(t, err)
	}

	type prepared struct {
		Statement       string
		Generic, Custom int64
	}
	rows, err := pool.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement LIKE '%INSERT INTO jobs%' AND statement NOT LIKE '%pg_prepared_statements%'`)
	require.NoError(t, err)
	stmts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[prepared])
	require.NoError(t, err)
	require.Len(t, stmts, 2, "the plain insert and the insert with conflict handling, each prepared once")
	for _, s := range stmts {
		require.Zero(t, s.Custom, "an insert was planned again at an execution:\n%s", s.Statement)
		require.Equal(t, int64(inserts), s.Generic, "an insert ran without its generic plan:\n%s", s.Statement)
	}
}
