package scenario

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync/atomic"
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

// River's client settings for throughput, as River's own benchmark
// (cmd/river/riverbench) configures its client: a 2 ms fetch cooldown and a
// 20 ms poll interval instead of the defaults (100 ms and 1 s), which its
// author found to perform much better when pushing jobs through as fast as
// possible. River's completer is its default, the batch completer, which
// marks finished jobs completed in batched statements.
const (
	RiverFetchCooldown     = 2 * time.Millisecond
	RiverFetchPollInterval = 20 * time.Millisecond
)

// RiverParams shape one River run. MaxWorkers is the client's slot count
// (River's bench uses 2,000; the river scenario uses pulse's workers ×
// concurrency so both sides have the same number of slots).
type RiverParams struct {
	Jobs, Producers, Batch int
	MaxWorkers             int
	// PoolConns sizes each of the two pools (the worker client's and the
	// inserting client's); 0 is pgxpool's default, max(4, CPUs), which is
	// what River's CLI benchmark runs with.
	PoolConns int32
	// Clients is how many worker clients share the slots, each with its
	// own pool of PoolConns, as River runs in that many processes; 0 or 1
	// is one, River's own setup. Set it to the pulse side's gateway count
	// to compare one dispatch loop per gateway with one per River client.
	Clients int
}

// RiverSide runs the pulse workloads through River, in this process: an
// insert-only client for the producers (as producers in another process
// would be, with their own pool, like pulse's producers going through
// control-api) and a worker client with a no-op worker.
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
	started *atomic.Int64
}

func (w *riverNoopWorker) Work(context.Context, *river.Job[riverNoopArgs]) error {
	w.started.Add(1)
	return nil
}

func (r *RiverSide) pool(ctx context.Context, conns int32, name string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(r.url)
	if err != nil {
		return nil, err
	}
	if conns > 0 {
		cfg.MaxConns = conns
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	return pgxpool.NewWithConfig(ctx, cfg)
}

// clients opens one run's River clients and pools: workers run the jobs
// (started counts their handlers), inserter inserts them, check reads the
// database for the run's end. closeAll closes every pool.
func (r *RiverSide) clients(ctx context.Context, p RiverParams, started *atomic.Int64) (workers *riverWorkers, inserter *river.Client[pgx.Tx], check *pgxpool.Pool, closeAll func(), err error) {
	var pools []*pgxpool.Pool
	closeAll = func() {
		for _, pool := range pools {
			pool.Close()
		}
	}
	ipool, err := r.pool(ctx, p.PoolConns, "river-load-insert")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	pools = append(pools, ipool)
	n := max(p.Clients, 1)
	workers = &riverWorkers{}
	for i := range n {
		wpool, err := r.pool(ctx, p.PoolConns, "river-load-worker")
		if err != nil {
			closeAll()
			return nil, nil, nil, nil, err
		}
		pools = append(pools, wpool)
		slots := p.MaxWorkers / n
		if i < p.MaxWorkers%n {
			slots++
		}
		registry := river.NewWorkers()
		river.AddWorker(registry, &riverNoopWorker{started: started})
		worker, err := river.NewClient(riverpgxv5.New(wpool), &river.Config{
			FetchCooldown:     RiverFetchCooldown,
			FetchPollInterval: RiverFetchPollInterval,
			Logger:            r.logger,
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: slots}},
			Workers:           registry,
		})
		if err != nil {
			closeAll()
			return nil, nil, nil, nil, err
		}
		workers.clients = append(workers.clients, worker)
	}
	// Insert-only (no queues, no workers); FetchCooldown also paces its
	// insert notifications, as it would the worker client's own.
	inserter, err = river.NewClient(riverpgxv5.New(ipool), &river.Config{
		FetchCooldown:     RiverFetchCooldown,
		FetchPollInterval: RiverFetchPollInterval,
		Logger:            r.logger,
	})
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	check, err = r.pool(ctx, 2, "river-load-check")
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	pools = append(pools, check)
	return workers, inserter, check, closeAll, nil
}

// riverWorkers are the worker clients of one run, started and stopped
// together.
type riverWorkers struct {
	clients []*river.Client[pgx.Tx]
}

// Start starts every client; if one fails, those already started are
// stopped.
func (w *riverWorkers) Start(ctx context.Context) error {
	for i, c := range w.clients {
		if err := c.Start(ctx); err != nil {
			_ = (&riverWorkers{clients: w.clients[:i]}).Stop(context.WithoutCancel(ctx))
			return err
		}
	}
	return nil
}

// Stop stops every client and returns the first error.

func (w *riverWorkers) Stop(ctx context.Context) error {
	var first error
	for _, c := range w.clients {
		if err := c.Stop(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// insert sends p.Jobs jobs from p.Producers goroutines in InsertMany calls
// of p.Batch.
func (r *RiverSide) insert(ctx context.Context, c *river.Client[pgx.Tx], p RiverParams) error {
	return produce(p.Jobs, p.Producers, p.Batch, func(k int) error {
		params := make([]river.InsertManyParams, k)
		for j := range params {
			params[j].Args = riverNoopArgs{}
		}
		_, err := c.InsertMany(ctx, params)
		return err
	})
}

// waitCompleted waits for the handlers to have seen every job, then for
// the database to show them completed (River's completer commits after the
// handler returns, as pulse's report does).
func (r *RiverSide) waitCompleted(ctx context.Context, pool *pgxpool.Pool, started *atomic.Int64, jobs int) error {
	for started.Load() < int64(jobs) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	for {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n); err != nil {
			return err
		}
		if n >= int64(jobs) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("river: only %d of %d jobs completed: %w", n, jobs, ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Concurrent runs the concurrent workload: the worker client is started,
// then producers insert p.Jobs; elapsed is the first insert to the
// database showing every job completed. Call Reset before.
func (r *RiverSide) Concurrent(ctx context.Context, p RiverParams) (Result, error) {
	var started atomic.Int64
	worker, inserter, check, closeAll, err := r.clients(ctx, p, &started)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
	if err := worker.Start(ctx); err != nil {
		return Result{}, fmt.Errorf("river: start: %w", err)
	}
	defer func() { _ = worker.Stop(context.WithoutCancel(ctx)) }()

	begin := time.Now()
	if err := r.insert(ctx, inserter, p); err != nil {
		return Result{}, fmt.Errorf("river: insert: %w", err)
	}
	submitDone := time.Since(begin)
	if err := r.waitCompleted(ctx, check, &started, p.Jobs); err != nil {
		return Result{}, err
	}
	elapsed := time.Since(begin)
	return Result{
		Scenario: "river-concurrent",
		Params:   r.params(p),
		Metrics: map[string]float64{
			"jobs_per_s":   float64(p.Jobs) / elapsed.Seconds(),
			"submit_per_s": float64(p.Jobs) / submitDone.Seconds(),
			"elapsed_s":    elapsed.Seconds(),
		},
	}, nil
}

// Backlog runs the backlog workload: producers InsertMany p.Jobs before the
// worker client starts, then before (BacklogReady: settle, checkpoint,
// start the meter), then the client starts; elapsed is Start to the
// database showing every job completed. Call Reset before.
func (r *RiverSide) Backlog(ctx context.Context, p RiverParams, before func() error) (Result, error) {
	var started atomic.Int64
	worker, inserter, check, closeAll, err := r.clients(ctx, p, &started)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
	t0 := time.Now()
	if err := r.insert(ctx, inserter, p); err != nil {
		return Result{}, fmt.Errorf("river: insert: %w", err)
	}
	insertTook := time.Since(t0)
	if before != nil {
		if err := before(); err != nil {
			return Result{}, err
		}
	}
	begin := time.Now()
	if err := worker.Start(ctx); err != nil {
		return Result{}, fmt.Errorf("river: start: %w", err)
	}
	defer func() { _ = worker.Stop(context.WithoutCancel(ctx)) }()
	if err := r.waitCompleted(ctx, check, &started, p.Jobs); err != nil {
		return Result{}, err
	}
	elapsed := time.Since(begin)
	return Result{
		Scenario: "river-backlog",
		Params:   r.params(p),
		Metrics: map[string]float64{
			"jobs_per_s":   float64(p.Jobs) / elapsed.Seconds(),
			"elapsed_s":    elapsed.Seconds(),
			"insert_per_s": float64(p.Jobs) / insertTook.Seconds(),
		},
	}, nil
}

func (r *RiverSide) params(p RiverParams) map[string]any {
	return map[string]any{"jobs": p.Jobs, "producers": p.Producers, "batch": p.Batch,
		"max_workers": p.MaxWorkers, "pool_conns": p.PoolConns, "clients": max(p.Clients, 1),
		"fetch_cooldown": RiverFetchCooldown.String(), "fetch_poll_interval": RiverFetchPollInterval.String()}
}
