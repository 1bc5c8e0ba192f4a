package migrate_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/migrate"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// Sizes of TestMigrationUnderLoad.
const (
	liveTableRows  = 300_000 // finished jobs already in the table
	liveSubmitters = 2
	liveClaimers   = 3
	liveBatch      = 10 // jobs per submit and slots per claim
)

// TestMigrationUnderLoad: a database at the baseline whose jobs table holds
// 300,000 finished jobs takes the live test set (testdata/live: an index
// built CONCURRENTLY, a CHECK added NOT VALID, then validated) through
// migrate.Up with its defaults, while goroutines submit, claim and report
// through the real jobstore statements. The migration completes, no submit,
// claim or report fails, and claims and submits keep committing while it
// runs. The longest a claim took, during the migration and outside it, is
// logged for docs/benchmarks.md (measured, not asserted).
func TestMigrationUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// The table as a deployment that has run for a while has it: mostly
	// finished jobs, some dead letters. Loaded with triggers off, as
	// pg_restore would; the CHECKs still hold every row.
	loadStart := time.Now()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, fmt.Sprintf(`
		INSERT INTO jobs (id, topic, args, status, attempts, max_attempts, locked_by, submitted_at, started_at, finished_at, next_run_at)
		SELECT gen_random_uuid(), 'bulk.' || (i %% 20), jsonb_build_object('i', i),
		       CASE WHEN i %% 10 = 0 THEN 'DEAD_LETTERED' ELSE 'COMPLETED' END, 1, 1, 'w',
		       now() - interval '1 day', now() - interval '1 day', now() - interval '23 hours', now() - interval '1 day'
		FROM generate_series(1, %d) AS i`, liveTableRows))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `RESET session_replication_role`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `VACUUM ANALYZE jobs`)
	require.NoError(t, err)
	conn.Release()
	t.Logf("loaded %d finished jobs in %s", liveTableRows, time.Since(loadStart).Round(time.Millisecond))

	store := jobstore.New(pool)
	t.Cleanup(func() { require.NoError(t, store.Close()) })

	// phase: 0 before the migration, 1 during it, 2 after it.
	var phase atomic.Int32
	var (
		submitted, claimed, reported [3]atomic.Int64
		mu                           sync.Mutex
		claimWaits                   [3][]time.Duration
		failures                     []error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, err)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for s := range liveSubmitters {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				jobs := make([]pulsetype.NewJob, liveBatch)
				for i := range jobs {
					jobs[i] = pulsetype.NewJob{ID: uuid.Must(uuid.NewV7()), Topic: "live", Args: []byte(`{}`), Priority: 5, MaxAttempts: 3}
				}
				p := phase.Load()
				if _, err := store.Insert(loadCtx, jobs); err != nil {
					if loadCtx.Err() == nil {
						fail(fmt.Errorf("submitter %d: %w", s, err))
					}
					return
				}
				submitted[p].Add(int64(len(jobs)))
			}
		})
	}
	for c := range liveClaimers {
		worker := fmt.Sprintf("w%d", c)
		slots := make([]string, liveBatch)
		for i := range slots {
			slots[i] = worker
		}
		wg.Go(func() {
			for loadCtx.Err() == nil {
				p := phase.Load()
				start := time.Now()
				got, err := store.Claim(loadCtx, []string{"live"}, slots, time.Minute)
				wait := time.Since(start)
				if err != nil {
					if loadCtx.Err() == nil {
						fail(fmt.Errorf("claimer %d: claim: %w", c, err))
					}
					return
				}
				mu.Lock()
				claimWaits[max(p, phase.Load())] = append(claimWaits[max(p, phase.Load())], wait)
				mu.Unlock()
				if len(got) == 0 {
					continue
				}
				claimed[p].Add(int64(len(got)))
				results := make([]pulsetype.Result, len(got))
				for i, j := range got {
					results[i] = pulsetype.Result{Ref: pulsetype.AttemptRef{ID: j.ID, Attempt: j.Attempt}, Outcome: pulsetype.OutcomeComplete, Worker: worker}
				}
				acks, err := store.Report(loadCtx, "migrate-test", results)
				if err != nil {
					if loadCtx.Err() == nil {
						fail(fmt.Errorf("claimer %d: report: %w", c, err))
					}
					return
				}
				for _, a := range acks {
					if !a.Accepted {
						fail(fmt.Errorf("claimer %d: report refused: %s", c, a.Reason))
					}
				}
				reported[p].Add(int64(len(acks)))
			}
		})
	}
	t.Cleanup(func() { stopLoad(); wg.Wait() })

	// reached: n reports have committed, or a goroutine failed (checked
	// below, with what failed).
	failedSoFar := func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), failures...)
	}
	failed := func() bool { return len(failedSoFar()) > 0 }
	reached := func(n *atomic.Int64) func() bool {
		return func() bool { return n.Load() >= 500 || failed() }
	}
	// The load runs before the migration starts...
	waitFor(t, "claims to commit before the migration", reached(&reported[0]))
	require.Empty(t, failedSoFar(), "no submit, claim or report failed before the migration")
	rec := &recorder{}
	phase.Store(1)
	migStart := time.Now()
	v, err := migrate.Up(ctx, url, opts(liveSet(t), slog.New(rec)))
	migTook := time.Since(migStart)
	phase.Store(2)
	require.NoError(t, err)
	require.Equal(t, liveVersion(4), v)
	// ... and after it ends.
	waitFor(t, "claims to commit after the migration", reached(&reported[2]))
	stopLoad()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, failures, "no submit, claim or report failed")
	require.Positive(t, submitted[1].Load(), "submits committed during the migration")
	require.Positive(t, claimed[1].Load(), "claims committed during the migration")

	var valid, validated bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'jobs_topic_id_idx'::regclass`).Scan(&valid))
	require.True(t, valid, "the index built CONCURRENTLY is valid")
	require.NoError(t, pool.QueryRow(ctx, `SELECT convalidated FROM pg_constraint WHERE conname = 'jobs_traceparent_length'`).Scan(&validated))
	require.True(t, validated, "the constraint is validated")

	stats := func(ws []time.Duration) string {
		if len(ws) == 0 {
			return "no claims"
		}
		s := append([]time.Duration(nil), ws...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return fmt.Sprintf("%d claims, median %s, p99 %s, worst %s", len(s),
			s[len(s)/2].Round(time.Microsecond), s[len(s)*99/100].Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond))
	}
	t.Logf("the live test's migrations 00002-00004 on %d rows took %s, %d lock_timeout retries", liveTableRows, migTook.Round(time.Millisecond), rec.count(retryMsg))
	t.Logf("during the migration: %d jobs submitted, %d claimed; claim wait: %s", submitted[1].Load(), claimed[1].Load(), stats(claimWaits[1]))
	t.Logf("outside it: claim wait before: %s; after: %s", stats(claimWaits[0]), stats(claimWaits[2]))
}
