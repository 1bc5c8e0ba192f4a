package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// waitersPerClient is how many of the waiters share one client
// connection, below the server's 1,024 concurrent calls per connection.
const waitersPerClient = 1000

// WaitersParams shape the waiters run.
type WaitersParams struct {
	// Waiters is how many jobs are submitted and waited for, one
	// Client.Wait each, all at once.
	Waiters int
	// Window is how long Postgres's transactions are counted, once with
	// no waiter and once with every waiter waiting.
	Window time.Duration
}

// Waiters measures what waiting for jobs costs Postgres: the database's
// committed transactions per second over Window with the fleet idle, then
// again with Waiters callers blocked in Client.Wait (long-polls on
// control-api, woken by NOTIFY, ADR-0041) on as many queued jobs. The
// difference is what the waiters cost: nothing per waiter is the claim.
// Then a worker completes every job with a result, and the run reports how
// long until every waiter had its job back, result included.
func Waiters(ctx context.Context, t Target, p WaitersParams) (Result, error) {
	topic := fmt.Sprintf("load.waiters.%d", time.Now().UnixNano())
	client, err := pulse.NewClient(t.ControlGRPC)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	// One connection carries at most grpcserver.MaxConcurrentStreams
	// (1,024) calls at once: the waiters spread over a client (a
	// connection) per waitersPerClient, as an application waiting on that
	// many jobs at once would.
	waitClients := make([]*pulse.Client, (p.Waiters+waitersPerClient-1)/waitersPerClient)
	for i := range waitClients {
		c, err := pulse.NewClient(t.ControlGRPC)
		if err != nil {
			return Result{}, err
		}
		defer c.Close()
		waitClients[i] = c
	}

	conn, err := pgx.Connect(ctx, t.DatabaseURL)
	if err != nil {
		return Result{}, err
	}
	defer conn.Close(ctx)
	xacts := func() (int64, error) {
		var n int64
		_, _ = conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
		err := conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
		return n, err
	}
	// rate counts over Window; our own two reads and clears are taken
	// out.
	rate := func() (float64, error) {
		time.Sleep(StatsSettle)
		before, err := xacts()
		if err != nil {
			return 0, err
		}
		time.Sleep(p.Window)
		after, err := xacts()
		if err != nil {
			return 0, err
		}
		return float64(after-before-4) / p.Window.Seconds(), nil
	}

	ids := make([]string, 0, p.Waiters)
	for len(ids) < p.Waiters {
		n := min(1000, p.Waiters-len(ids))
		reqs := make([]pulse.JobRequest, n)
		for i := range reqs {
			reqs[i] = pulse.JobRequest{Topic: topic, Args: map[string]int{"n": len(ids) + i}}
		}
		subs, err := client.EnqueueMany(ctx, reqs)
		if err != nil {
			return Result{}, err
		}
		for _, s := range subs {
			ids = append(ids, s.ID)
		}
	}

	idle, err := rate()
	if err != nil {
		return Result{}, err
	}

	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var waitErr error
	finished := 0
	var lastDone time.Time
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := waitClients[i/waitersPerClient].Wait(waitCtx, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				waitErr = err
			case len(info.Result) == 0:
				waitErr = fmt.Errorf("job %s came back %s without its result", id, info.Status)
			default:
				finished++
				lastDone = time.Now()
			}
		}()
	}
	defer wg.Wait()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := scrapeGauge(ctx, t.ControlHTTP+"/metrics", "pulse_job_waiters")
		if err == nil && int(n) >= p.Waiters {
			break
		}
		if time.Now().After(deadline) {
			return Result{}, fmt.Errorf("only %v of %d waiters waiting: %w", n, p.Waiters, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waiting, err := rate()
	if err != nil {
		return Result{}, err
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := pulse.NewWorker(t.GatewayAddrs, pulse.WithConcurrency(256), pulse.WithLogger(quiet))
	if err != nil {
		return Result{}, err
	}
	w.Register(topic, func(ctx context.Context, job *pulse.Job) error {
		return job.SetResult(json.RawMessage(`{"ok":true}`))
	})
	workCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	go func() { _ = w.Run(workCtx) }()
	released := time.Now()
	wg.Wait()
	stopWorker()
	if waitErr != nil {
		return Result{}, waitErr
	}
	return Result{
		Scenario: "waiters",
		Params:   map[string]any{"waiters": p.Waiters, "window": p.Window.String()},
		Metrics: map[string]float64{
			"db_xacts_per_s_no_waiters":   idle,
			"db_xacts_per_s_with_waiters": waiting,
			"db_xacts_per_s_per_waiter":   (waiting - idle) / float64(p.Waiters),
			"waiters_answered":            float64(finished),
			"run_and_answer_all_seconds":  lastDone.Sub(released).Seconds(),
		},
	}, nil
}
