package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// RawSQLParams shape the raw-SQL ceiling run.
type RawSQLParams struct {
	Jobs, Producers, Batch int
	// Claimers are the claim loops (each one claim of ClaimBatch in flight,
	// like one gateway's claim loop); Completers the loops that settle what
	// was claimed, up to CompleteBatch jobs per statement (like a gateway's
	// report flusher).
	Claimers, ClaimBatch      int
	Completers, CompleteBatch int
	// Backlog inserts every job before the first claim and times only the
	// work-off; otherwise the inserts run concurrently with the claim loops
	// and the time is first insert to last completion.
	Backlog bool
}

// The raw-SQL ceiling drives pulse's real jobs table (its CHECKs, triggers
// and indexes, durable settings) with pulse's own statement shapes over
// plain pgx, with no service in between. The statements mirror jobstore's
// (pkg/server/jobstore: insertRowsSQL, claimSQL with its plan settings and
// pause barrier, reportSQL's completion path): the difference between this
// number and pulse's is what the services cost (gRPC, the gateways'
// bookkeeping, the SDK), not what the schema costs. If jobstore's
// statements change, change these with them.
const (
	rawInsertSQL = `
INSERT INTO jobs (id, topic, args, priority, max_attempts, next_run_at,
                  idempotency_key, schedule_id, traceparent, tracestate)
SELECT id, $2, '{}'::jsonb, 5, 25, now(), NULL, NULL, NULL, NULL
FROM unnest($1::uuid[]) AS t(id)`

	rawPlanSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

	// The claim takes the pause barrier shared, as pulse's does.
	rawClaimPlanSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true), pg_advisory_xact_lock_shared(` + jobstore.PauseBarrierKey + `)`

	rawClaimSQL = `
WITH picked AS (
    SELECT id FROM jobs
    WHERE status IN ('PENDING', 'RETRYING')
      AND next_run_at <= now()
      AND topic = ANY($1::text[])
      AND NOT EXISTS (SELECT 1 FROM dispatch_control WHERE scope = '` + jobstore.GlobalScope + `' AND paused)
      AND topic <> ALL (ARRAY(SELECT scope FROM dispatch_control WHERE paused))
    ORDER BY priority DESC, submitted_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs AS j
SET status      = 'RUNNING',
    attempts    = j.attempts + 1,
    locked_by   = $3,
    lease_until = now() + interval '1 minute',
    started_at  = GREATEST(now(), j.submitted_at)
FROM picked
WHERE j.id = picked.id
RETURNING j.id, j.attempts, j.topic, j.args, j.priority, j.max_attempts,
          j.submitted_at, j.lease_until, j.locked_by,
          COALESCE(j.traceparent, ''), COALESCE(j.tracestate, '')`

	rawCompleteSQL = `
UPDATE jobs AS j
SET status = 'COMPLETED', finished_at = now(), next_run_at = j.next_run_at,
    lease_until = NULL, errors = j.errors
FROM unnest($1::text[], $2::uuid[], $3::int[]) AS r(worker, id, attempt)
WHERE j.id = r.id
  AND j.attempts = r.attempt
  AND (j.status || '') = 'RUNNING'
  AND j.locked_by = r.worker
RETURNING j.id, j.attempts, j.status, j.topic, j.submitted_at, j.started_at, j.next_run_at`
)

type rawClaimed struct {
	id      [16]byte
	attempt int32
	worker  string
}

// RawSQL measures the raw-SQL ceiling on the jobs table of databaseURL:
// batched INSERTs of Jobs rows (Producers × Batch) with claim loops and
// completion loops, concurrently or (Backlog) after the inserts. before,
// when set, runs just before the timed part starts: the caller's meter,
// and for a backlog BacklogReady (settle, checkpoint, start the meter).
func RawSQL(ctx context.Context, databaseURL string, p RawSQLParams, before func() error) (Result, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return Result{}, err
	}
	cfg.MaxConns = int32(p.Producers + p.Claimers + p.Completers + 1)
	cfg.ConnConfig.RuntimeParams["application_name"] = "pulse-load-rawsql"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	topic := fmt.Sprintf("load.rawsql.%d", time.Now().UnixNano())

	var inserted atomic.Int64
	insertAll := func() error {
		return produce(p.Jobs, p.Producers, p.Batch, func(k int) error {
			ids := make([][16]byte, k)
			for j := range ids {
				ids[j] = uuid.Must(uuid.NewV7()) // pulse mints v7 ids too
			}
			if _, err := pool.Exec(ctx, rawInsertSQL, ids, topic); err != nil {
				return err
			}
			inserted.Add(int64(k))
			return nil
		})
	}

	var insertTook time.Duration
	if p.Backlog {
		t0 := time.Now()
		if err := insertAll(); err != nil {
			return Result{}, fmt.Errorf("rawsql: insert: %w", err)
		}
		insertTook = time.Since(t0)
	}
	if before != nil {
		if err := before(); err != nil {
			return Result{}, err
		}
	}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var completed, claimStmts, completeStmts atomic.Int64
	claimed := make(chan []rawClaimed, 4*p.Claimers)
	var cwg, swg sync.WaitGroup
	begin := time.Now()
	var insertErr error
	var iwg sync.WaitGroup
	if !p.Backlog {
		iwg.Add(1)
		go func() {
			defer iwg.Done()
			t0 := time.Now()
			if err := insertAll(); err != nil {
				insertErr = err
				cancel(fmt.Errorf("rawsql: insert: %w", err))
			}
			insertTook = time.Since(t0)
		}()
	}
	for i := range p.Claimers {
		worker := fmt.Sprintf("rawsql-%d", i)
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			// What pulse's gateway reads of each claimed job, read and dropped.
			var sink struct {
				topic, lockedBy, traceParent, traceState string
				args                                     []byte
				priority                                 int16
				maxAttempts                              int32
				submittedAt, leaseUntil                  time.Time
			}
			for runCtx.Err() == nil {
				b := &pgx.Batch{}
				b.Queue(rawClaimPlanSQL)
				b.Queue(rawClaimSQL, []string{topic}, p.ClaimBatch, worker)
				br := pool.SendBatch(runCtx, b)
				_, err := br.Exec()
				var got []rawClaimed
				if err == nil {
					var rows pgx.Rows
					if rows, err = br.Query(); err == nil {
						for rows.Next() {
							var c rawClaimed
							if err = rows.Scan(&c.id, &c.attempt, &sink.topic, &sink.args, &sink.priority, &sink.maxAttempts,
								&sink.submittedAt, &sink.leaseUntil, &sink.lockedBy, &sink.traceParent, &sink.traceState); err != nil {
								break
							}
							c.worker = worker
							got = append(got, c)
						}
						rows.Close()
						if err == nil {
							err = rows.Err()
						}
					}
				}
				if cerr := br.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					if runCtx.Err() == nil {
						cancel(fmt.Errorf("rawsql: claim: %w", err))
					}
					return
				}
				claimStmts.Add(1)
				if len(got) > 0 {
					select {
					case claimed <- got:
					case <-runCtx.Done():
						return
					}
				}
				if len(got) < p.ClaimBatch {
					// The queue head is empty (the producers are behind, or
					// the backlog is gone): back off as River's fetch
					// cooldown and pulse's NOTIFY-less poll would.
					time.Sleep(2 * time.Millisecond)
				}
			}
		}()
	}
	for range p.Completers {
		swg.Add(1)
		go func() {
			defer swg.Done()
			for {
				var batch []rawClaimed
				select {
				case got, ok := <-claimed:
					if !ok {
						return
					}
					batch = append(batch, got...)
				case <-runCtx.Done():
					return
				}
				// Fold whatever else is waiting, as a gateway's report
				// flusher folds the results that arrived meanwhile.
			fold:
				for len(batch) < p.CompleteBatch {
					select {
					case got, ok := <-claimed:
						if !ok {
							break fold
						}
						batch = append(batch, got...)
					default:
						break fold
					}
				}
				if err := rawComplete(runCtx, pool, batch); err != nil {
					if runCtx.Err() == nil {
						cancel(fmt.Errorf("rawsql: complete: %w", err))
					}
					return
				}
				completeStmts.Add(1)
				if completed.Add(int64(len(batch))) >= int64(p.Jobs) {
					cancel(nil)
					return
				}
			}
		}()
	}
	swg.Wait()
	elapsed := time.Since(begin)
	cancel(nil)
	cwg.Wait()
	iwg.Wait()
	if insertErr != nil {
		return Result{}, insertErr
	}
	if n := completed.Load(); n < int64(p.Jobs) {
		cause := context.Cause(runCtx)
		return Result{}, fmt.Errorf("rawsql: only %d of %d jobs completed: %w", n, p.Jobs, cause)
	}
	name := "rawsql-concurrent"
	if p.Backlog {
		name = "rawsql-backlog"
	}
	m := map[string]float64{
		"jobs_per_s":          float64(p.Jobs) / elapsed.Seconds(),
		"elapsed_s":           elapsed.Seconds(),
		"insert_per_s":        float64(p.Jobs) / insertTook.Seconds(),
		"jobs_per_claim":      float64(p.Jobs) / float64(max(claimStmts.Load(), 1)),
		"jobs_per_completion": float64(p.Jobs) / float64(max(completeStmts.Load(), 1)),
	}
	return Result{
		Scenario: name,
		Params: map[string]any{"jobs": p.Jobs, "producers": p.Producers, "batch": p.Batch,
			"claimers": p.Claimers, "claim_batch": p.ClaimBatch, "completers": p.Completers, "complete_batch": p.CompleteBatch},
		Metrics: m,
	}, nil
}

// rawComplete settles batch in one statement (each row fenced by its own
// worker, as a gateway's folded report is) under the pinned plan
// settings, and checks that every row settled.
func rawComplete(ctx context.Context, pool *pgxpool.Pool, batch []rawClaimed) error {
	workers := make([]string, len(batch))
	ids := make([][16]byte, len(batch))
	attempts := make([]int32, len(batch))
	for i, c := range batch {
		workers[i], ids[i], attempts[i] = c.worker, c.id, c.attempt
	}
	b := &pgx.Batch{}
	b.Queue(rawPlanSQL)
	b.Queue(rawCompleteSQL, workers, ids, attempts)
	br := pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return err
	}
	tag, err := br.Exec()
	if err != nil {
		br.Close()
		return err
	}
	if err := br.Close(); err != nil {
		return err
	}
	if n := tag.RowsAffected(); n != int64(len(batch)) {
		return fmt.Errorf("settled %d of %d claimed jobs", n, len(batch))
	}
	return nil
}
