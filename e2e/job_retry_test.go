package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
)

// retryTimes is what the test reads of a job's retry from Postgres, every
// time the database's own: when its first attempt failed (the error
// entry's "at", the failing statement's now()), when it was due again
// (next_run_at, kept by the claim that took it), and when its second
// attempt started.
type retryTimes struct {
	Status     string
	Attempts   int
	FailedAt   time.Time
	NextRunAt  time.Time
	StartedAt  time.Time
	FirstError string
}

func readRetryTimes(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id string) retryTimes {
	t.Helper()
	var r retryTimes
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT status, attempts, (errors->0->>'at')::timestamptz, next_run_at, started_at, errors->0->>'error'
		FROM jobs WHERE id = $1`, id).Scan(&r.Status, &r.Attempts, &r.FailedAt, &r.NextRunAt, &r.StartedAt, &r.FirstError))
	return r
}

// TestJobRetryPolicyAndRetryAfter: real control-api, gateway and SDK
// worker. A job submitted over HTTP with "retry": {"fixed": "2s"} whose
// first attempt fails is due again exactly 2s after the failure and its
// second attempt starts no earlier; a handler that returns
// pulse.RetryAfter(3s, err) on a job with an exponential policy of its own
// makes its next attempt wait exactly 3s instead of the backoff. Both
// completions and failures are counted in job_throughput under the
// gateway's id.
func TestJobRetryPolicyAndRetryAfter(t *testing.T) {
	t.Parallel()
	f := upFleet(t, localfleet.Options{Gateways: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()

	var mu sync.Mutex
	attempts := map[string][]int{}
	record := func(job *pulse.Job) {
		mu.Lock()
		attempts[job.ID] = append(attempts[job.ID], job.Attempt)
		mu.Unlock()
	}
	startSDKWorker(t, ctx, f, func(w *pulse.Worker) {
		w.Register("e2e.retry.fixed", func(ctx context.Context, job *pulse.Job) error {
			record(job)
			if job.Attempt == 1 {
				return errors.New("upstream down")
			}
			return nil
		})
		w.Register("e2e.retry.after", func(ctx context.Context, job *pulse.Job) error {
			record(job)
			if job.Attempt == 1 {
				return pulse.RetryAfter(3*time.Second, errors.New("rate limited"))
			}
			return nil
		})
	})

	// Over HTTP, as a curl user would.
	resp, err := http.Post(f.ControlHTTP+"/v1/jobs", "application/json",
		bytes.NewReader([]byte(`{"topic":"e2e.retry.fixed","max_attempts":3,"retry":{"fixed":"2s"}}`)))
	require.NoError(t, err)
	var fixed pulse.Submitted
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&fixed))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// Through the SDK, with a backoff of its own that RetryAfter overrides.
	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	defer client.Close()
	snoozed, err := client.Enqueue(ctx, "e2e.retry.after", nil, pulse.MaxAttempts(3),
		pulse.ExponentialBackoff(time.Minute, time.Hour))
	require.NoError(t, err)
	info, err := client.Get(ctx, snoozed.ID)
	require.NoError(t, err)
	require.Equal(t, pulse.RetryPolicy{Base: time.Minute, Max: time.Hour}, info.Retry)

	for id, wait := range map[string]time.Duration{fixed.ID: 2 * time.Second, snoozed.ID: 3 * time.Second} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, "COMPLETED", readJobState(t, ctx, pool, id).Status)
		}, time.Minute, 100*time.Millisecond, id)
		r := readRetryTimes(t, ctx, pool, id)
		require.Equal(t, 2, r.Attempts, "the failed attempt, then the one that completed")
		require.Equal(t, wait, r.NextRunAt.Sub(r.FailedAt), "%s: due again exactly %s after its failure", id, wait)
		require.False(t, r.StartedAt.Before(r.NextRunAt), "%s: the retry started at %s, before it was due at %s", id, r.StartedAt, r.NextRunAt)
		mu.Lock()
		require.Equal(t, []int{1, 2}, attempts[id])
		mu.Unlock()
	}
	require.Equal(t, "upstream down", readRetryTimes(t, ctx, pool, fixed.ID).FirstError)
	require.Equal(t, "rate limited", readRetryTimes(t, ctx, pool, snoozed.ID).FirstError)

	// Each topic's one failure and one completion, counted by the gateway.
	rows, err := pool.Query(ctx, `
		SELECT topic, writer, sum(completed)::int, sum(failed)::int, sum(dead_lettered)::int
		FROM job_throughput WHERE topic LIKE 'e2e.retry.%' GROUP BY topic, writer ORDER BY topic`)
	require.NoError(t, err)
	type row struct {
		topic, writer           string
		completed, failed, dead int
	}
	var got []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.topic, &r.writer, &r.completed, &r.failed, &r.dead))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	gw := localfleet.DispatchGateway + "-1"
	require.Equal(t, []row{{"e2e.retry.after", gw, 1, 1, 0}, {"e2e.retry.fixed", gw, 1, 1, 0}}, got)
}
