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

// insertCounter counts the INSERT INTO jobs statements a pool runs.
type insertCounter struct{ n atomic.Int64 }

func (c *insertCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(strings.TrimSpace(d.SQL), "INSERT INTO jobs") {
		c.n.Add(1)
	}
	return ctx
}

func (*insertCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

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
