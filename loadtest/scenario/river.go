package scenario

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// RiverDatabase is the database River's tables live in, on the same
// cluster as pulse's: River's migrations create river_job and friends in its
// public schema, and nothing of pulse's is there.
const RiverDatabase = "pulse_load_river"

// River's client and pool as River's own CLI benchmark (cmd/river/riverbench
// and cmd/river/rivercli) configures them: one client that both inserts and
// works, MaxWorkers 2,000 on the default queue, a 2 ms fetch cooldown and a
// 20 ms poll interval instead of the defaults (100 ms and 1 s), which its
// author found to perform much better when pushing jobs through as fast as
// possible, and a pgxpool with its default size (max(4, CPUs)) and the CLI's
// session settings. River's completer is its default, the batch completer.
const (
	RiverFetchCooldown     = 2 * time.Millisecond
	RiverFetchPollInterval = 20 * time.Millisecond
	RiverMaxWorkers        = 2000
	// riverStatementTimeout and riverIdleInTxTimeout are the CLI's
	// defaults for its pool's sessions.
	riverStatementTimeout = 10 * time.Second
	riverIdleInTxTimeout  = 11 * time.Second
)

// RiverSide runs the River CLI benchmark's workloads (BenchWorkload)
// through River, in this process, as `river bench` does: one client that
// inserts and works, with a no-op worker.
type RiverSide struct {
	url    string
	logger *slog.Logger
}

// NewRiverSide creates RiverDatabase on the cluster that databaseURL points
// at (if it does not exist) and migrates River's schema into it with
// rivermigrate.
func NewRiverSide(ctx context.Context, databaseURL string) (*RiverSide, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("river: database URL: %w", err)
	}
	admin, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, RiverDatabase).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		if _, err := admin.Exec(ctx, `CREATE DATABASE `+RiverDatabase); err != nil {
			return nil, fmt.Errorf("river: create database: %w", err)
		}
	}
	u.Path = "/" + RiverDatabase
	r := &RiverSide{url: u.String(), logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	pool, err := pgxpool.New(ctx, r.url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: r.logger})
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river: migrate: %w", err)
	}
	return r, nil
}

// URL is the River database's connection string.
func (r *RiverSide) URL() string { return r.url }

// Reset empties river_job as River's benchmark does before each run
// (TRUNCATE, then VACUUM FULL), then checkpoints.
func (r *RiverSide) Reset(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, q := range []string{`TRUNCATE river_job`, `VACUUM FULL river_job`, `CHECKPOINT`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("river: %s: %w", q, err)
		}
	}
	return nil
}

type riverNoopArgs struct{}

// Kind names the job kind; its args encode as {}, the same payload as the
// pulse side's jobs.
func (riverNoopArgs) Kind() string { return "pulse_load_noop" }

type riverNoopWorker struct {
	river.WorkerDefaults[riverNoopArgs]
	bench *riverBench
}

// Work does nothing; under the soak it reports the job's queue lag.
func (w *riverNoopWorker) Work(_ context.Context, j *river.Job[riverNoopArgs]) error {
	if f := w.bench.started; f != nil {
		f(time.Since(j.CreatedAt))
	}
	return nil
}

// riverBench is River under the CLI benchmark's workloads: one client on
// one pool, as `river bench` runs.
type riverBench struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	events <-chan *river.Event
	cancel func()
	params []river.InsertManyParams
	// started, when set before start, is told each job's queue lag as
	// its handler starts (the soak).
	started func(lag time.Duration)
}

// bench opens the client as River's CLI does (see RiverMaxWorkers). Close
// it after the run.
func (r *RiverSide) bench(ctx context.Context) (*riverBench, error) { return r.benchWith(ctx, 0) }

// benchWith is bench with River's job cleaner deleting completed jobs
// once retention old (0: River's default, 24 hours).
func (r *RiverSide) benchWith(ctx context.Context, retention time.Duration) (*riverBench, error) {
	cfg, err := pgxpool.ParseConfig(r.url)
	if err != nil {
		return nil, err
	}
	rp := cfg.ConnConfig.RuntimeParams
	rp["application_name"] = "river CLI"
	rp["idle_in_transaction_session_timeout"] = strconv.Itoa(int(riverIdleInTxTimeout.Milliseconds()))
	rp["statement_timeout"] = strconv.Itoa(int(riverStatementTimeout.Milliseconds()))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	b := &riverBench{pool: pool}
	registry := river.NewWorkers()
	river.AddWorker(registry, &riverNoopWorker{bench: b})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		CompletedJobRetentionPeriod: retention,
		FetchCooldown:               RiverFetchCooldown,
		FetchPollInterval:           RiverFetchPollInterval,
		Logger:                      r.logger,
		Queues:                      map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: RiverMaxWorkers}},
		Workers:                     registry,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	// The CLI counts a job worked when its completion event arrives (after
	// the completer committed it), on a channel large enough to drop none.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: BenchMinJobs,
		Kinds:    []river.EventKind{river.EventKindJobCancelled, river.EventKindJobCompleted, river.EventKindJobFailed},
	})
	params := make([]river.InsertManyParams, BenchInsertBatch)
	for i := range params {
		params[i].Args = riverNoopArgs{}
	}
	b.client, b.events, b.cancel, b.params = client, events, cancel, params
	return b, nil
}

func (b *riverBench) close() {
	b.cancel()
	b.pool.Close()
}

func (b *riverBench) insert(ctx context.Context, n int) error {
	_, err := b.client.InsertMany(ctx, b.params[:n])
	return err
}

func (b *riverBench) start(ctx context.Context, done func()) (func(), error) {
	evCtx, stopEvents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-evCtx.Done():
				return
			case ev, ok := <-b.events:
				if !ok {
					return
				}
				if ev.Kind == river.EventKindJobCompleted {
					done()
				}
			}
		}
	})
	if err := b.client.Start(ctx); err != nil {
		stopEvents()
		wg.Wait()
		return nil, err
	}
	return func() {
		_ = b.client.Stop(context.WithoutCancel(ctx))
		stopEvents()
		wg.Wait()
	}, nil
}

func (b *riverBench) completed(ctx context.Context) (int64, error) {
	var n int64
	err := b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n)
	return n, err
}

// Bench runs one River CLI workload through River. Call Reset before.
func (r *RiverSide) Bench(ctx context.Context, w BenchWorkload, before func() error) (Result, error) {
	b, err := r.bench(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("river: %w", err)
	}
	defer b.close()
	run, err := runBench(ctx, b, w, before)
	if err != nil {
		return Result{}, fmt.Errorf("river: %w", err)
	}
	return benchResult("river-"+w.Mode, w, run, map[string]any{
		"max_workers": RiverMaxWorkers, "fetch_cooldown": RiverFetchCooldown.String(),
		"fetch_poll_interval": RiverFetchPollInterval.String(), "pool_conns": b.pool.Config().MaxConns,
	}), nil
}

// benchResult is one side's run of w as a Result.
func benchResult(name string, w BenchWorkload, run benchRun, params map[string]any) Result {
	params["mode"] = w.Mode
	if w.Mode == WorkloadBacklog {
		params["jobs"] = w.Total
	} else {
		params["duration"] = w.Duration.String()
	}
	return Result{
		Scenario: name,
		Params:   params,
		Metrics: map[string]float64{
			"jobs_per_s": run.rate(),
			"jobs":       float64(run.jobs),
			"elapsed_s":  run.elapsed.Seconds(),
		},
	}
}
