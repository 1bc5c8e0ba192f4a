package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// RawSQLParams shape the raw-SQL ceiling's consumers.
type RawSQLParams struct {
	// Claimers are the claim loops (each one claim of ClaimBatch in flight,
	// like one gateway's claim loop); Completers the loops that settle what
	// was claimed, up to CompleteBatch jobs per statement (like a gateway's
	// report flusher).
	Claimers, ClaimBatch      int
	Completers, CompleteBatch int
}

// The raw-SQL ceiling drives pulse's real jobs table (its CHECKs, triggers
// and indexes, durable settings) with pulse's own statements — jobstore's
// Claim, ClaimAfter and Report, what a gateway runs — from plain loops
// over one pgx pool, with no service, no gRPC and no SDK in between: the
// difference between this number and pulse's is what the services cost,
// not what the schema or the statements cost. Inserts are one multi-row
// INSERT of the River CLI's batch (BenchInsertBatch rows).
const rawInsertSQL = `
INSERT INTO jobs (id, topic, args, priority, max_attempts, next_run_at,
                  idempotency_key, schedule_id, traceparent, tracestate)
SELECT id, $2, '{}'::jsonb, 5, 25, now(), NULL, NULL, NULL, NULL
FROM unnest($1::uuid[]) AS t(id)`

// rawLease is the lease the raw claims take: long enough that none
// expires during a run.
const rawLease = time.Minute

// rawBench is the raw-SQL ceiling under the River CLI's workloads: one
// multi-row INSERT per insert, claim loops and completion loops straight
// on the pool.
type rawBench struct {
	p     RawSQLParams
	pool  *pgxpool.Pool
	store *jobstore.Store
	topic string
}

func (b *rawBench) insert(ctx context.Context, n int) error {
	ids := make([][16]byte, n)
	for j := range ids {
		ids[j] = uuid.Must(uuid.NewV7()) // pulse mints v7 ids too
	}
	_, err := b.pool.Exec(ctx, rawInsertSQL, ids, b.topic)
	return err
}

func (b *rawBench) completed(ctx context.Context) (int64, error) { return countCompleted(ctx, b.pool) }

// start runs Claimers pipelines, each a claim loop (one claim of
// ClaimBatch in flight, resuming after its last job as a gateway's claim
// loop does) feeding its own share of the Completers completion loops
// (each one Report of up to CompleteBatch in flight, folding what was
// claimed meanwhile, as a gateway's report flusher does). A statement that
// fails stops them all (the run then fails on its count).
func (b *rawBench) start(ctx context.Context, done func()) (func(), error) {
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range b.p.Claimers {
		worker := fmt.Sprintf("rawsql-%d", i)
		claimed := make(chan []pulsetype.Claimed, 4)
		wg.Go(func() {
			if err := b.claimLoop(runCtx, worker, claimed); err != nil && runCtx.Err() == nil {
				cancel()
			}
		})
		for range max(b.p.Completers/b.p.Claimers, 1) {
			wg.Go(func() {
				if err := b.completeLoop(runCtx, worker, claimed, done); err != nil && runCtx.Err() == nil {
					cancel()
				}
			})
		}
	}
	return func() { cancel(); wg.Wait() }, nil
}

func (b *rawBench) claimLoop(ctx context.Context, worker string, claimed chan<- []pulsetype.Claimed) error {
	slots := make([]string, b.p.ClaimBatch)
	for i := range slots {
		slots[i] = worker
	}
	var (
		cursor jobstore.ClaimCursor
		resume bool
	)
	for ctx.Err() == nil {
		var got []pulsetype.Claimed
		var err error
		if resume {
			got, err = b.store.ClaimAfter(ctx, []string{b.topic}, slots, rawLease, cursor.Back(jobstore.ClaimSkewMargin))
		} else {
			got, err = b.store.Claim(ctx, []string{b.topic}, slots, rawLease)
		}
		if err != nil {
			return err
		}
		if last, ok := jobstore.LastClaimed(got); ok && len(got) == len(slots) {
			cursor, resume = last, true
		} else {
			resume = false
		}
		if len(got) > 0 {
			select {
			case claimed <- got:
			case <-ctx.Done():
				return nil
			}
		}
		if len(got) < len(slots) {
			// The queue head is short (the inserter is behind, or the
			// backlog is gone): back off as River's fetch cooldown and a
			// gateway's cooldown would.
			time.Sleep(2 * time.Millisecond)
		}
	}
	return nil
}

func (b *rawBench) completeLoop(ctx context.Context, worker string, claimed <-chan []pulsetype.Claimed, done func()) error {
	for {
		var batch []pulsetype.Result
		add := func(got []pulsetype.Claimed) {
			for _, c := range got {
				batch = append(batch, pulsetype.Result{Ref: pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt},
					Outcome: pulsetype.OutcomeComplete, Worker: worker})
			}
		}
		select {
		case got := <-claimed:
			add(got)
		case <-ctx.Done():
			return nil
		}
	fold:
		for len(batch) < b.p.CompleteBatch {
			select {
			case got := <-claimed:
				add(got)
			default:
				break fold
			}
		}
		acks, err := b.store.Report(ctx, worker, batch)
		if err != nil {
			return err
		}
		for _, a := range acks {
			if !a.Accepted {
				return fmt.Errorf("job %s not settled: %s", a.Ref.ID, a.Reason)
			}
			done()
		}
	}
}

// RawSQL runs one River CLI workload as raw SQL on pulse's jobs table at
// databaseURL. Call ResetJobs before.
func RawSQL(ctx context.Context, databaseURL string, p RawSQLParams, w BenchWorkload, before func() error) (Result, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return Result{}, err
	}
	cfg.MaxConns = int32(p.Claimers + p.Completers + 2)
	cfg.ConnConfig.RuntimeParams["application_name"] = "pulse-load-rawsql"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	b := &rawBench{p: p, pool: pool, store: jobstore.New(pool), topic: fmt.Sprintf("load.rawsql.%d", time.Now().UnixNano())}
	run, err := runBench(ctx, b, w, before)
	if err != nil {
		return Result{}, fmt.Errorf("rawsql: %w", err)
	}
	return benchResult("rawsql-"+w.Mode, w, run, map[string]any{
		"claimers": p.Claimers, "claim_batch": p.ClaimBatch, "completers": p.Completers, "complete_batch": p.CompleteBatch,
	}), nil
}
