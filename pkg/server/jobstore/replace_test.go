package jobstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

func replaceJob(topic, key string, mode pulsetype.ReplaceMode, args string, runAt time.Time) pulsetype.NewJob {
	j := newJob(topic, 5)
	j.Args, j.ReplaceKey, j.ReplaceMode, j.RunAt = []byte(args), key, mode, runAt
	return j
}

// replacement is one row of a job's replacement history.
type replacement struct {
	N           int
	ArgsBefore  string
	RunAtBefore time.Time
	RunAtAfter  time.Time
}

func replacementsOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) []replacement {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT n, args_before::text, run_at_before, run_at_after FROM job_replacements WHERE job_id = $1 ORDER BY n`, id)
	require.NoError(t, err)
	defer rows.Close()
	var out []replacement
	for rows.Next() {
		var r replacement
		require.NoError(t, rows.Scan(&r.N, &r.ArgsBefore, &r.RunAtBefore, &r.RunAtAfter))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

func argsAndRunAt(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) (string, time.Time) {
	t.Helper()
	var args string
	var runAt time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT args::text, next_run_at FROM jobs WHERE id = $1`, id).Scan(&args, &runAt))
	return args, runAt
}

// Each mode does what it says to the key's pending job, and every change
// is an entry of the job's history; once the job has started, the key's
// next submit is a new job; the key is per topic.
func TestReplacePendingModes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	t0 := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)

	first := replaceJob("rp", "k", pulsetype.ReplaceArgsAndRunAt, `{"v": 1}`, t0)
	requireInserted(t, store, first, pulsetype.Inserted{ID: first.ID})

	// replace: args and run_at.
	requireInserted(t, store, replaceJob("rp", "k", pulsetype.ReplaceArgsAndRunAt, `{"v": 2}`, t0.Add(time.Hour)),
		pulsetype.Inserted{ID: first.ID, Duplicate: true, Replaced: true})
	args, runAt := argsAndRunAt(t, pool, first.ID)
	require.Equal(t, `{"v": 2}`, args)
	require.True(t, runAt.Equal(t0.Add(time.Hour)), runAt)

	// keep_earlier_run_at: args, and the earlier run_at (the job's, here).
	requireInserted(t, store, replaceJob("rp", "k", pulsetype.ReplaceKeepEarlierRunAt, `{"v": 3}`, t0.Add(2*time.Hour)),
		pulsetype.Inserted{ID: first.ID, Duplicate: true, Replaced: true})
	args, runAt = argsAndRunAt(t, pool, first.ID)
	require.Equal(t, `{"v": 3}`, args)
	require.True(t, runAt.Equal(t0.Add(time.Hour)), runAt)
	// ... and the submit's when it is earlier.
	requireInserted(t, store, replaceJob("rp", "k", pulsetype.ReplaceKeepEarlierRunAt, `{"v": 4}`, t0),
		pulsetype.Inserted{ID: first.ID, Duplicate: true, Replaced: true})
	args, runAt = argsAndRunAt(t, pool, first.ID)
	require.Equal(t, `{"v": 4}`, args)
	require.True(t, runAt.Equal(t0), runAt)

	// keep_first: nothing changes, no history.
	requireInserted(t, store, replaceJob("rp", "k", pulsetype.ReplaceKeepFirst, `{"v": 5}`, t0.Add(-time.Minute)),
		pulsetype.Inserted{ID: first.ID, Duplicate: true})
	args, runAt = argsAndRunAt(t, pool, first.ID)
	require.Equal(t, `{"v": 4}`, args)
	require.True(t, runAt.Equal(t0), runAt)

	hist := replacementsOf(t, pool, first.ID)
	require.Len(t, hist, 3)
	for i, want := range []replacement{
		{N: 1, ArgsBefore: `{"v": 1}`, RunAtBefore: t0, RunAtAfter: t0.Add(time.Hour)},
		{N: 2, ArgsBefore: `{"v": 2}`, RunAtBefore: t0.Add(time.Hour), RunAtAfter: t0.Add(time.Hour)},
		{N: 3, ArgsBefore: `{"v": 3}`, RunAtBefore: t0.Add(time.Hour), RunAtAfter: t0},
	} {
		require.Equal(t, want.N, hist[i].N)
		require.Equal(t, want.ArgsBefore, hist[i].ArgsBefore)
		require.True(t, want.RunAtBefore.Equal(hist[i].RunAtBefore), "entry %d", i)
		require.True(t, want.RunAtAfter.Equal(hist[i].RunAtAfter), "entry %d", i)
	}
	job, err := store.Get(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, "k", job.ReplaceKey)
	require.EqualValues(t, 3, job.Replaced)

	// Another topic's key of the same name is its own, and so is another
	// key of the topic.
	other := replaceJob("rp.other", "k", pulsetype.ReplaceArgsAndRunAt, `{}`, time.Time{})
	requireInserted(t, store, other, pulsetype.Inserted{ID: other.ID})
	otherKey := replaceJob("rp", "k2", pulsetype.ReplaceArgsAndRunAt, `{}`, t0)
	requireInserted(t, store, otherKey, pulsetype.Inserted{ID: otherKey.ID})

	// Started (claimed), the job no longer takes replacements: a new job.
	_, err = pool.Exec(ctx, `UPDATE jobs SET next_run_at = now() WHERE id = $1`, first.ID)
	require.NoError(t, err)
	claimed, err := store.Claim(ctx, []string{"rp"}, slots("w", 1), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.JSONEq(t, `{"v": 4}`, string(claimed[0].Args))
	next := replaceJob("rp", "k", pulsetype.ReplaceArgsAndRunAt, `{"v": 6}`, time.Time{})
	requireInserted(t, store, next, pulsetype.Inserted{ID: next.ID})

	// A snooze puts the claimed job back PENDING, but it has started: the
	// key's pending job is still the new one.
	_, err = store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: first.ID, Attempt: 1}, Outcome: pulsetype.OutcomeSnooze, RetryAfter: time.Hour}})
	require.NoError(t, err)
	requireInserted(t, store, replaceJob("rp", "k", pulsetype.ReplaceArgsAndRunAt, `{"v": 7}`, time.Time{}),
		pulsetype.Inserted{ID: next.ID, Duplicate: true, Replaced: true})
	args, _ = argsAndRunAt(t, pool, first.ID)
	require.Equal(t, `{"v": 4}`, args)
}

// Concurrent submits of one key leave exactly one pending job, and every
// submit is accounted for: with replace, each one's args are either the
// job's now (the last to commit) or an entry of its history, once; with
// keep_first, the job keeps the args of the submit that inserted it.
func TestReplaceConcurrentSubmitsOfOneKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	const submits = 24

	for _, mode := range []pulsetype.ReplaceMode{pulsetype.ReplaceArgsAndRunAt, pulsetype.ReplaceKeepFirst} {
		topic := "rp.race." + string(mode)
		results := make([]pulsetype.Inserted, submits)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range submits {
			wg.Go(func() {
				<-start
				job := replaceJob(topic, "k", mode, fmt.Sprintf(`{"n": %d}`, i), time.Time{})
				// Half through the coalesced path, half through the batch path.
				if i%2 == 0 {
					out, errs := store.InsertEach(ctx, []pulsetype.NewJob{newJob(topic+".plain", 5), job})
					if errs != nil {
						require.NoError(t, errs[1])
					}
					results[i] = out[1]
					return
				}
				out, err := store.Insert(ctx, []pulsetype.NewJob{job})
				require.NoError(t, err)
				results[i] = out[0]
			})
		}
		close(start)
		wg.Wait()

		require.Equal(t, 1, countTopic(t, pool, topic), mode)
		var inserted int
		var holder uuid.UUID
		for i, r := range results {
			if !r.Duplicate {
				inserted++
				holder = r.ID
				require.False(t, r.Replaced, "submit %d", i)
			} else {
				require.Equal(t, mode == pulsetype.ReplaceArgsAndRunAt, r.Replaced, "submit %d", i)
			}
		}
		require.Equal(t, 1, inserted, mode)
		for _, r := range results {
			require.Equal(t, holder, r.ID)
		}
		args, _ := argsAndRunAt(t, pool, holder)
		hist := replacementsOf(t, pool, holder)
		if mode == pulsetype.ReplaceKeepFirst {
			require.Empty(t, hist)
			var first int
			for i, r := range results {
				if !r.Duplicate {
					first = i
				}
			}
			require.Equal(t, fmt.Sprintf(`{"n": %d}`, first), args)
			continue
		}
		require.Len(t, hist, submits-1)
		seen := map[string]int{args: 1}
		for _, h := range hist {
			seen[h.ArgsBefore]++
		}
		require.Len(t, seen, submits, "every submit's args once: %v", seen)
		for i := range submits {
			require.Equal(t, 1, seen[fmt.Sprintf(`{"n": %d}`, i)], "submit %d", i)
		}
	}
}

// A replace racing a claim: either the claim took the job with its old
// args and the submit inserted a new job with the new ones, or the submit
// replaced the args and the job runs (now or at the next claim) with the
// new ones. Never a claim of the new args with a new job beside it, never
// a replacement lost.
func TestReplaceRacingAClaim(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	const rounds = 40
	var claimedOld, replacedFirst int
	for round := range rounds {
		topic := fmt.Sprintf("rp.claim.%d", round)
		old := replaceJob(topic, "k", pulsetype.ReplaceArgsAndRunAt, `{"v": "old"}`, time.Time{})
		requireInserted(t, store, old, pulsetype.Inserted{ID: old.ID})

		var res pulsetype.Inserted
		var claimed []pulsetype.Claimed
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			out, err := store.Insert(ctx, []pulsetype.NewJob{replaceJob(topic, "k", pulsetype.ReplaceArgsAndRunAt, `{"v": "new"}`, time.Time{})})
			require.NoError(t, err)
			res = out[0]
		})
		wg.Go(func() {
			<-start
			var err error
			claimed, err = store.Claim(ctx, []string{topic}, slots("w", 1), time.Minute)
			require.NoError(t, err)
		})
		close(start)
		wg.Wait()

		if len(claimed) == 1 && string(claimed[0].Args) == `{"v": "old"}` {
			claimedOld++
			require.Equal(t, old.ID, claimed[0].ID)
			require.False(t, res.Duplicate, "round %d: the claim took the old args, so the submit is a new job", round)
			require.NotEqual(t, old.ID, res.ID)
			args, _ := argsAndRunAt(t, pool, res.ID)
			require.Equal(t, `{"v": "new"}`, args)
			require.Empty(t, replacementsOf(t, pool, old.ID))
			continue
		}
		replacedFirst++
		require.Equal(t, pulsetype.Inserted{ID: old.ID, Duplicate: true, Replaced: true}, res, "round %d", round)
		if len(claimed) == 0 { // the claim skipped the row the submit held
			var err error
			claimed, err = store.Claim(ctx, []string{topic}, slots("w", 1), time.Minute)
			require.NoError(t, err)
		}
		require.Len(t, claimed, 1, "round %d", round)
		require.Equal(t, old.ID, claimed[0].ID)
		require.JSONEq(t, `{"v": "new"}`, string(claimed[0].Args))
		require.Equal(t, 1, countTopic(t, pool, topic))
	}
	t.Logf("%d rounds: the claim won %d, the replacement %d", rounds, claimedOld, replacedFirst)
}

// The schema allows a job's args to change only by a replacement (while
// PENDING, never started, with replaced + 1), which leaves its history
// entry; replace_key never changes; the history is append-only and goes
// with its job.
func TestReplaceGuard(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	job := replaceJob("rp.guard", "k", pulsetype.ReplaceArgsAndRunAt, `{"v": 1}`, time.Time{})
	requireInserted(t, store, job, pulsetype.Inserted{ID: job.ID})
	plain := newJob("rp.guard.plain", 5)
	requireInserted(t, store, plain, pulsetype.Inserted{ID: plain.ID})

	refused := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, sql)
		require.Equal(t, "23514", pgErr.Code, sql)
	}
	refused(`UPDATE jobs SET args = '{"v": 2}' WHERE id = $1`, job.ID)
	refused(`UPDATE jobs SET args = '{"v": 2}' WHERE id = $1`, plain.ID)
	refused(`UPDATE jobs SET replaced = replaced + 2, args = '{"v": 2}' WHERE id = $1`, job.ID)
	refused(`UPDATE jobs SET replaced = replaced + 1, status = 'CANCELED' WHERE id = $1`, job.ID)
	refused(`UPDATE jobs SET replace_key = 'other' WHERE id = $1`, job.ID)
	refused(`UPDATE jobs SET replace_key = 'k' WHERE id = $1`, plain.ID)
	refused(`INSERT INTO jobs (id, topic, args, max_attempts, replaced) VALUES (gen_random_uuid(), 't', '{}', 3, 1)`)
	refused(`INSERT INTO jobs (id, topic, args, max_attempts, replace_key) VALUES (gen_random_uuid(), 't', '{}', 3, '')`)

	// The legal replacement by hand writes its history entry too.
	_, err := pool.Exec(ctx, `UPDATE jobs SET args = '{"v": 2}', replaced = replaced + 1 WHERE id = $1`, job.ID)
	require.NoError(t, err)
	require.Len(t, replacementsOf(t, pool, job.ID), 1)
	refused(`UPDATE job_replacements SET args_before = '{}' WHERE job_id = $1`, job.ID)
	refused(`DELETE FROM job_replacements WHERE job_id = $1`, job.ID)

	// Started, it takes no replacement.
	claimed, err := store.Claim(ctx, []string{"rp.guard"}, slots("w", 1), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	refused(`UPDATE jobs SET args = '{"v": 3}', replaced = replaced + 1 WHERE id = $1`, job.ID)

	// Finished and deleted by retention, its history goes with it.
	_, err = store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: job.ID, Attempt: 1}, Outcome: pulsetype.OutcomeComplete}})
	require.NoError(t, err)
	n, err := store.DeleteFinished(ctx, pulsetype.StatusCompleted, 0, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Empty(t, replacementsOf(t, pool, job.ID))
}
