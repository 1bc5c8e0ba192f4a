package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetx"
)

// jobState is what the tests here read of a job, straight from Postgres.
type jobState struct {
	Status   string
	Attempts int
	Errors   []struct {
		Attempt int    `json:"attempt"`
		Error   string `json:"error"`
	}
}

func readJobState(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id string) jobState {
	t.Helper()
	var s jobState
	var errs []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, attempts, errors FROM jobs WHERE id = $1`, id).Scan(&s.Status, &s.Attempts, &errs))
	require.NoError(t, json.Unmarshal(errs, &s.Errors))
	return s
}

func startSDKWorker(t *testing.T, ctx context.Context, f *localfleet.Fleet, register func(w *pulse.Worker)) {
	t.Helper()
	w, err := pulse.NewWorker(f.GatewayAddrs, pulse.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	register(w)
	ctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
}

// TestJobTimeoutFailsTheAttemptAndRetries: real control-api and gateway,
// an SDK worker. A job submitted with timeout 1s whose handler sleeps 3s
// without looking at its context fails that attempt "timed out after 1s"
// and is retried; the retry, which returns at once, completes it. A job
// without its own timeout gets the topic's (WithTimeout) and a handler
// that honours its context fails on time.
func TestJobTimeoutFailsTheAttemptAndRetries(t *testing.T) {
	t.Parallel()
	f := upFleet(t, localfleet.Options{Gateways: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()

	type run struct {
		attempt  int
		timeout  time.Duration
		deadline bool
		took     time.Duration
	}
	var mu sync.Mutex
	runs := map[string][]run{}
	record := func(job *pulse.Job, r run) {
		mu.Lock()
		runs[job.ID] = append(runs[job.ID], r)
		mu.Unlock()
	}
	startSDKWorker(t, ctx, f, func(w *pulse.Worker) {
		w.Register("e2e.timeout.sleep", func(ctx context.Context, job *pulse.Job) error {
			start := time.Now()
			_, hasDeadline := ctx.Deadline()
			if job.Attempt == 1 {
				time.Sleep(3 * time.Second) // ignores its context
			}
			record(job, run{job.Attempt, job.Timeout, hasDeadline, time.Since(start)})
			return nil
		})
		w.Register("e2e.timeout.polite", func(ctx context.Context, job *pulse.Job) error {
			start := time.Now()
			_, hasDeadline := ctx.Deadline()
			<-ctx.Done()
			record(job, run{job.Attempt, job.Timeout, hasDeadline, time.Since(start)})
			return ctx.Err()
		}, pulse.WithTimeout(time.Second))
	})

	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	defer client.Close()
	sleepy, err := client.Enqueue(ctx, "e2e.timeout.sleep", nil, pulse.Timeout(time.Second), pulse.MaxAttempts(3))
	require.NoError(t, err)
	// Over HTTP, as a curl user would.
	resp, err := http.Post(f.ControlHTTP+"/v1/jobs", "application/json",
		bytes.NewReader([]byte(`{"topic":"e2e.timeout.polite","max_attempts":1}`)))
	require.NoError(t, err)
	var polite pulse.Submitted
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&polite))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s := readJobState(t, ctx, pool, sleepy.ID)
		assert.Equal(c, "COMPLETED", s.Status)
	}, time.Minute, 100*time.Millisecond)
	s := readJobState(t, ctx, pool, sleepy.ID)
	require.Equal(t, 2, s.Attempts, "the timed-out attempt, then the one that completed")
	require.Len(t, s.Errors, 1)
	require.Equal(t, 1, s.Errors[0].Attempt)
	require.Equal(t, "timed out after 1s", s.Errors[0].Error)
	mu.Lock()
	got := runs[sleepy.ID]
	mu.Unlock()
	require.Len(t, got, 2)
	for _, r := range got {
		require.Equal(t, time.Second, r.timeout)
		require.True(t, r.deadline, "the handler's context carries the deadline")
	}

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "DEAD_LETTERED", readJobState(t, ctx, pool, polite.ID).Status)
	}, time.Minute, 100*time.Millisecond)
	s = readJobState(t, ctx, pool, polite.ID)
	require.Len(t, s.Errors, 1)
	require.Equal(t, "timed out after 1s", s.Errors[0].Error)
	mu.Lock()
	got = runs[polite.ID]
	mu.Unlock()
	require.Len(t, got, 1)
	require.Equal(t, time.Second, got[0].timeout, "the topic's default")
	require.InDelta(t, time.Second, got[0].took, float64(500*time.Millisecond))
}

// TestUniqueForRaceThroughTheAPI: fifty producers, over HTTP and gRPC at
// once, submit the same unique job to a real control-api; the database
// holds exactly one, every producer is answered with it, and one of them
// created it.
func TestUniqueForRaceThroughTheAPI(t *testing.T) {
	t.Parallel()
	f := upFleet(t, localfleet.Options{Gateways: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()
	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	defer client.Close()

	const producers = 50
	answers := make([]pulse.Submitted, producers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var failures atomic.Int64
	for i := range producers {
		wg.Go(func() {
			<-start
			var err error
			switch i % 3 {
			case 0: // gRPC, keys in another order: the same args
				answers[i], err = client.Enqueue(ctx, "e2e.unique", json.RawMessage(`{"shop":7,"day":"2026-11-23"}`), pulse.UniqueFor(time.Hour))
			case 1:
				var out []pulse.Submitted
				out, err = client.EnqueueMany(ctx, []pulse.JobRequest{{Topic: "e2e.unique", Args: json.RawMessage(`{"day":"2026-11-23","shop":7}`),
					Options: []pulse.EnqueueOption{pulse.UniqueFor(time.Hour)}}})
				if err == nil {
					answers[i] = out[0]
				}
			default: // HTTP
				var resp *http.Response
				resp, err = http.Post(f.ControlHTTP+"/v1/jobs", "application/json",
					bytes.NewReader([]byte(`{"topic":"e2e.unique","args":{"day":"2026-11-23","shop":7},"unique_for":"1h"}`)))
				if err == nil {
					err = json.NewDecoder(resp.Body).Decode(&answers[i])
					resp.Body.Close()
				}
			}
			if err != nil {
				failures.Add(1)
				t.Errorf("producer %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Zero(t, failures.Load())
	created := 0
	for _, a := range answers {
		require.Equal(t, answers[0].ID, a.ID)
		if !a.Duplicate {
			created++
		}
	}
	require.Equal(t, 1, created, "exactly one producer created the job")
	var jobs, keys int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = 'e2e.unique'`).Scan(&jobs))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_uniques WHERE job_id = $1`, answers[0].ID).Scan(&keys))
	require.Equal(t, 1, jobs)
	require.Equal(t, 1, keys)
}

// TestTransactionalEnqueueRunsOnCommitOnly: an application enqueues with
// pulsetx inside its own transaction on pulse's database, beside its own
// row. Rolled back, no job exists and no worker ever runs one; committed,
// a real gateway wakes at the commit and an SDK worker runs the job.
func TestTransactionalEnqueueRunsOnCommitOnly(t *testing.T) {
	t.Parallel()
	f := upFleet(t, localfleet.Options{Gateways: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE TABLE e2e_orders (id int PRIMARY KEY, email text NOT NULL)`)
	require.NoError(t, err)

	ran := make(chan string, 10)
	startSDKWorker(t, ctx, f, func(w *pulse.Worker) {
		w.Register("e2e.order.confirm", func(ctx context.Context, job *pulse.Job) error {
			var o struct {
				ID int `json:"id"`
			}
			if err := job.UnmarshalArgs(&o); err != nil {
				return pulse.Permanent(err)
			}
			var email string
			if err := pool.QueryRow(ctx, `SELECT email FROM e2e_orders WHERE id = $1`, o.ID).Scan(&email); err != nil {
				return err // the order must exist: the job came with it
			}
			ran <- job.ID
			return nil
		})
	})

	place := func(id int, commit bool) pulse.Submitted {
		t.Helper()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // committed or rolled back below
		_, err = tx.Exec(ctx, `INSERT INTO e2e_orders VALUES ($1, 'a@example.com')`, id)
		require.NoError(t, err)
		s, err := pulsetx.Enqueue(ctx, tx, "e2e.order.confirm", map[string]int{"id": id}, pulse.UniqueFor(time.Hour))
		require.NoError(t, err)
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
		return s
	}

	rolledBack := place(1, false)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = $1`, rolledBack.ID).Scan(&n))
	require.Zero(t, n)

	committed := place(2, true)
	select {
	case id := <-ran:
		require.Equal(t, committed.ID, id)
	case <-time.After(30 * time.Second):
		t.Fatal("the committed job did not run")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "COMPLETED", readJobState(t, ctx, pool, committed.ID).Status)
	}, 30*time.Second, 50*time.Millisecond)
	select {
	case id := <-ran:
		t.Fatalf("job %s ran, but only the committed one exists", id)
	case <-time.After(time.Second):
	}
}
