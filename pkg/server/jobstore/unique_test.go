package jobstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

func uniqueJob(topic, args string, period time.Duration) pulsetype.NewJob {
	j := newJob(topic, 5)
	j.Args, j.UniqueFor = []byte(args), period
	return j
}

func countTopic(t *testing.T, pool *pgxpool.Pool, topic string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = $1`, topic).Scan(&n))
	return n
}

// A second submit of the same topic and args within the period is the
// first job, whatever its status; args compare as canonical JSON; another
// topic, other args or a non-unique submit are new jobs.
func TestUniqueForReturnsTheFirstJobWithinThePeriod(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	first := uniqueJob("uniq", `{"a": 1, "b": [1, 2]}`, time.Hour)
	requireInserted(t, store, first, pulsetype.Inserted{ID: first.ID})

	same := uniqueJob("uniq", `{"b":[1,2],"a":1}`, time.Minute) // other spelling, same jsonb
	requireInserted(t, store, same, pulsetype.Inserted{ID: first.ID, Duplicate: true})

	// Finished, it still holds the period.
	claimed, err := store.Claim(ctx, []string{"uniq"}, slots("w", 1), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	_, err = store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: first.ID, Attempt: 1}, Outcome: pulsetype.OutcomeComplete}})
	require.NoError(t, err)
	out, errs := store.InsertEach(ctx, []pulsetype.NewJob{uniqueJob("uniq", `{"a":1,"b":[1,2]}`, time.Hour)})
	require.Nil(t, errs)
	require.Equal(t, pulsetype.Inserted{ID: first.ID, Duplicate: true}, out[0])

	for _, other := range []pulsetype.NewJob{
		uniqueJob("uniq.other", `{"a":1,"b":[1,2]}`, time.Hour),
		uniqueJob("uniq", `{"a":2,"b":[1,2]}`, time.Hour),
		newJob("uniq", 5), // not unique at all
	} {
		requireInserted(t, store, other, pulsetype.Inserted{ID: other.ID})
	}
}

// Once the period has ended the next submit is a new job, which then holds
// the key for its own period.
func TestUniqueForEndsWithItsPeriod(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	first := uniqueJob("uniq.exp", `{"n":1}`, time.Second)
	_, err := store.Insert(ctx, []pulsetype.NewJob{first})
	require.NoError(t, err)
	// The period ends (as if a second had passed).
	_, err = pool.Exec(ctx, `UPDATE job_uniques SET since = since - interval '2 seconds', expires_at = expires_at - interval '2 seconds'`)
	require.NoError(t, err)

	second := uniqueJob("uniq.exp", `{"n":1}`, time.Hour)
	requireInserted(t, store, second, pulsetype.Inserted{ID: second.ID})
	requireInserted(t, store, uniqueJob("uniq.exp", `{"n":1}`, time.Hour), pulsetype.Inserted{ID: second.ID, Duplicate: true})
	require.Equal(t, 2, countTopic(t, pool, "uniq.exp"))

	var holder uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT job_id FROM job_uniques`).Scan(&holder))
	require.Equal(t, second.ID, holder)
}

// Fifty producers racing the same unique job create exactly one, through
// every entry point: single inserts, coalesced batches, and batches that
// repeat the job.
func TestUniqueForRaceCreatesExactlyOneJob(t *testing.T) {
	t.Parallel()
	const producers = 50
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = producers // every producer on its own connection, at once
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := newStore(t, pool)

	ids := make([]uuid.UUID, producers)
	errs := make([]error, producers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range producers {
		wg.Go(func() {
			<-start
			batch := []pulsetype.NewJob{uniqueJob("uniq.race", `{"order":42}`, time.Hour)}
			if i%3 == 1 {
				batch = append(batch, uniqueJob("uniq.race", `{"order": 42}`, time.Hour), newJob("uniq.race.plain", 5))
			}
			var res []pulsetype.Inserted
			if i%2 == 0 {
				res, errs[i] = store.Insert(ctx, batch)
			} else {
				var each []error
				res, each = store.InsertEach(ctx, batch)
				if each != nil {
					errs[i] = each[0]
				}
			}
			if errs[i] == nil {
				ids[i] = res[0].ID
				if len(res) > 1 {
					require.Equal(t, res[0].ID, res[1].ID, "the batch's repeat is its first")
					require.True(t, res[1].Duplicate)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range producers {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
	}
	require.Equal(t, 1, countTopic(t, pool, "uniq.race"))
	var keys int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_uniques WHERE job_id = $1`, ids[0]).Scan(&keys))
	require.Equal(t, 1, keys)
}

// unique_for composes with idempotency_key: a held unique key wins; a free
// unique key with a held idempotency key is the idempotency key's job and
// claims nothing; both free is a new job holding both.
func TestUniqueForComposesWithIdempotencyKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	keyed := newJob("uniq.idem", 5)
	keyed.IdempotencyKey = "k1"
	_, err := store.Insert(ctx, []pulsetype.NewJob{keyed})
	require.NoError(t, err)

	// Unique key free, idempotency key held: the keyed job, and no claim.
	both := uniqueJob("uniq.idem", `{"x":1}`, time.Hour)
	both.IdempotencyKey = "k1"
	requireInserted(t, store, both, pulsetype.Inserted{ID: keyed.ID, Duplicate: true})
	var claims int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_uniques`).Scan(&claims))
	require.Zero(t, claims)

	// Both free: a new job holding both.
	fresh := uniqueJob("uniq.idem", `{"x":1}`, time.Hour)
	fresh.IdempotencyKey = "k2"
	requireInserted(t, store, fresh, pulsetype.Inserted{ID: fresh.ID})

	// Unique key held, idempotency key free: the unique holder.
	again := uniqueJob("uniq.idem", `{"x":1}`, time.Hour)
	again.IdempotencyKey = "k3"
	requireInserted(t, store, again, pulsetype.Inserted{ID: fresh.ID, Duplicate: true})

	// In one batch: a keyed job, then a unique job with the same key: the
	// second is the first's duplicate and claims nothing.
	a := newJob("uniq.idem", 5)
	a.IdempotencyKey = "k4"
	b := uniqueJob("uniq.idem", `{"y":1}`, time.Hour)
	b.IdempotencyKey = "k4"
	out, errs := store.InsertEach(ctx, []pulsetype.NewJob{a, b})
	require.Nil(t, errs)
	require.Equal(t, []pulsetype.Inserted{{ID: a.ID}, {ID: a.ID, Duplicate: true}}, out)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_uniques WHERE job_id = $1`, b.ID).Scan(&claims))
	require.Zero(t, claims)
}

// A refused member of a batch holding unique jobs fails alone (InsertEach)
// or fails the batch naming itself (Insert), and its unique key stays free.
func TestUniqueBatchRefusedMemberFailsAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	good := uniqueJob("uniq.iso", `{"i":1}`, time.Hour)
	bad := uniqueJob("uniq.iso", `{"i":2}`, time.Hour)
	bad.Timeout = 48 * time.Hour // jobs_timeout_range refuses it
	plain := newJob("uniq.iso", 5)

	_, err := store.Insert(ctx, []pulsetype.NewJob{good, bad, plain})
	var member *jobstore.MemberError
	require.ErrorAs(t, err, &member)
	require.Equal(t, 1, member.Index)
	require.Equal(t, apierr.KindInvalidArgument, apierr.KindOf(err))
	require.Equal(t, "timeout", apierr.FieldOf(err))
	require.Zero(t, countTopic(t, pool, "uniq.iso"))

	out, errs := store.InsertEach(ctx, []pulsetype.NewJob{good, bad, plain})
	require.NotNil(t, errs)
	require.NoError(t, errs[0])
	require.Error(t, errs[1])
	require.Equal(t, "timeout", apierr.FieldOf(errs[1]))
	require.NoError(t, errs[2])
	require.Equal(t, pulsetype.Inserted{ID: good.ID}, out[0])
	require.Equal(t, pulsetype.Inserted{ID: plain.ID}, out[2])
	require.Equal(t, 2, countTopic(t, pool, "uniq.iso"))

	// The refused job claimed nothing: its args are still free.
	fixed := bad
	fixed.ID, fixed.Timeout = uuid.Must(uuid.NewV7()), time.Minute
	requireInserted(t, store, fixed, pulsetype.Inserted{ID: fixed.ID})
}

// Retention deleting the holder ends its period early: the key goes with
// it (ON DELETE CASCADE) and the next submit is a new job.
func TestUniqueKeyGoesWithItsJob(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	first := uniqueJob("uniq.ret", `{}`, time.Hour)
	_, err := store.Insert(ctx, []pulsetype.NewJob{first})
	require.NoError(t, err)
	_, err = store.Cancel(ctx, first.ID)
	require.NoError(t, err)
	n, err := store.DeleteFinished(ctx, pulsetype.StatusCanceled, 0, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	next := uniqueJob("uniq.ret", `{}`, time.Hour)
	requireInserted(t, store, next, pulsetype.Inserted{ID: next.ID})
}

// The schema holds the bounds: a timeout outside 1s..24h, a period outside
// 1s..366d, and a key held by a job that does not exist are refused.
func TestSchemaTimeoutAndUniqueBounds(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	for _, d := range []time.Duration{time.Millisecond, 25 * time.Hour} {
		j := newJob("bounds", 5)
		j.Timeout = d
		_, err := store.Insert(ctx, []pulsetype.NewJob{j})
		require.Error(t, err, "timeout %s", d)
		require.Equal(t, "timeout", apierr.FieldOf(err))
	}
	for _, d := range []time.Duration{time.Millisecond, 367 * 24 * time.Hour} {
		_, err := store.Insert(ctx, []pulsetype.NewJob{uniqueJob("bounds", `{}`, d)})
		require.Error(t, err, "unique_for %s", d)
		require.Equal(t, "unique_for", apierr.FieldOf(err))
	}
	require.Zero(t, countTopic(t, pool, "bounds"))

	j := newJob("bounds", 5)
	j.Timeout = 30 * time.Second
	_, err := store.Insert(ctx, []pulsetype.NewJob{j})
	require.NoError(t, err)
	got, err := store.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, got.Timeout)
	claimed, err := store.Claim(ctx, []string{"bounds"}, slots("w", 1), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, 30*time.Second, claimed[0].Timeout)

	_, err = pool.Exec(ctx, `INSERT INTO job_uniques (unique_key, job_id, expires_at) VALUES (gen_random_uuid(), gen_random_uuid(), now() + interval '1 hour')`)
	require.ErrorContains(t, err, "job_uniques_job_id_fkey")
}

// A unique job whose idempotency key is taken by a transaction that
// commits while the insert waits on it: the statement (which claimed the
// unique key for a job it then could not insert) fails whole, runs again
// on a fresh snapshot, and answers the key's job; no key is left claimed.
func TestUniqueForLosesItsIdempotencyKeyMidStatement(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	holder := newJob("uniq.racekey", 5)
	_, err = tx.Exec(ctx, `INSERT INTO jobs (id, topic, idempotency_key) VALUES ($1, $2, 'k')`, holder.ID, holder.Topic)
	require.NoError(t, err)

	j := uniqueJob("uniq.racekey", `{"z":1}`, time.Hour)
	j.IdempotencyKey = "k"
	type answer struct {
		res []pulsetype.Inserted
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := store.Insert(ctx, []pulsetype.NewJob{j})
		done <- answer{res, err}
	}()
	// Wait until the insert waits on the uncommitted key.
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, tx.Commit(ctx))

	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, []pulsetype.Inserted{{ID: holder.ID, Duplicate: true}}, got.res)
	var claims int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_uniques`).Scan(&claims))
	require.Zero(t, claims)
	require.Equal(t, 1, countTopic(t, pool, "uniq.racekey"))
}

// A unique insert, its duplicate, a timed job and a claim of them never
// call a jobs guard function: the rules on jobs are a CHECK and a table's
// keys. (The unique key's own check, that it names a job, is a constraint
// trigger on job_uniques since ADR-0068: one call per unique job written.)
func TestUniqueAndTimeoutPathsNeverCallAJobsGuard(t *testing.T) {
	t.Parallel()
	pool, guardCalls := guardCallCounter(t)
	store := newStore(t, pool)
	timed := newJob("plpgsql.free", 5)
	timed.Timeout = time.Minute
	_, err := store.Insert(ctx, []pulsetype.NewJob{uniqueJob("plpgsql.free", `{"a":1}`, time.Hour), timed})
	require.NoError(t, err)
	res, err := store.Insert(ctx, []pulsetype.NewJob{uniqueJob("plpgsql.free", `{"a":1}`, time.Hour)})
	require.NoError(t, err)
	require.True(t, res[0].Duplicate)
	claimed, err := store.Claim(ctx, []string{"plpgsql.free"}, slots("w", 2), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	require.Zero(t, guardCalls())
}

// requireInserted inserts job alone and requires the answer want.
func requireInserted(t *testing.T, store *jobstore.Store, job pulsetype.NewJob, want pulsetype.Inserted) {
	t.Helper()
	res, err := store.Insert(ctx, []pulsetype.NewJob{job})
	require.NoError(t, err)
	require.Equal(t, want, res[0])
}
