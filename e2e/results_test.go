package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// TestResultsAndWait: real control-api, gateway and SDK worker. A
// running handler's progress and metadata are visible while it runs; a
// handler's result is stored with its completion and comes back through
// EnqueueAndWait (gRPC WaitJob) and GET /v1/jobs/{id}; a long-poll waiting
// on a running job answers when the job completes, and one waiting on a
// queued job answers when an operator cancels it, each long before its
// own timeout (five minutes): woken by the statement that finished the
// job. A short wait on a job that stays queued answers with it queued;
// bad waits are refused naming the parameter.
func TestResultsAndWait(t *testing.T) {
	t.Parallel()
	f := upFleet(t, localfleet.Options{Gateways: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 2*proctest.Patience)
	defer cancel()
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()

	release := make(chan struct{})
	startSDKWorker(t, ctx, f, func(w *pulse.Worker) {
		w.Register("e2e.result.sum", func(ctx context.Context, job *pulse.Job) error {
			var in struct{ A, B int }
			if err := job.UnmarshalArgs(&in); err != nil {
				return pulse.Permanent(err)
			}
			return job.SetResult(map[string]int{"sum": in.A + in.B})
		})
		w.Register("e2e.result.slow", func(ctx context.Context, job *pulse.Job) error {
			if err := job.SetProgress(ctx, 50); err != nil {
				return err
			}
			if err := job.SetMetadata(ctx, map[string]any{"stage": "waiting"}); err != nil {
				return err
			}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return job.SetResult(json.RawMessage(`{"done": true}`))
		})
	})
	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	defer client.Close()

	info, err := client.EnqueueAndWait(ctx, "e2e.result.sum", map[string]int{"a": 2, "b": 40}, pulse.Tags("tenant=acme", "e2e"))
	require.NoError(t, err)
	require.Equal(t, []string{"e2e", "tenant=acme"}, info.Tags)
	tagged, _, err := client.List(ctx, pulse.ListOptions{Tag: "tenant=acme"})
	require.NoError(t, err)
	require.Len(t, tagged, 1)
	require.Equal(t, info.ID, tagged[0].ID)
	require.Equal(t, "COMPLETED", string(info.Status))
	var out struct{ Sum int }
	require.NoError(t, info.UnmarshalResult(&out))
	require.Equal(t, 42, out.Sum)
	var stored []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT result FROM jobs WHERE id = $1`, info.ID).Scan(&stored))
	require.JSONEq(t, `{"sum": 42}`, string(stored), "the result is in the row the completion settled")

	plain := getJob(t, ctx, f.ControlHTTP+"/v1/jobs/"+info.ID)
	require.JSONEq(t, `{"sum": 42}`, string(plain.Result))

	// A queued job (no worker serves the topic) and a short wait.
	queued, err := client.Enqueue(ctx, "e2e.result.nobody", nil)
	require.NoError(t, err)
	got := getJob(t, ctx, f.ControlHTTP+"/v1/jobs/"+queued.ID+"?wait=20ms")
	require.Equal(t, "PENDING", got.Status)

	// Waiting on the running job, then on the queued one: each answers
	// when its job finishes.
	slow, err := client.Enqueue(ctx, "e2e.result.slow", nil)
	require.NoError(t, err)
	// While it runs, its handler's progress and metadata show.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		j, err := client.Get(ctx, slow.ID)
		if assert.NoError(c, err) {
			assert.Equal(c, "RUNNING", string(j.Status))
			assert.Equal(c, 50, j.Progress)
			assert.JSONEq(c, `{"stage": "waiting"}`, string(j.Metadata))
		}
	}, proctest.Patience, 20*time.Millisecond)
	running := getJob(t, ctx, f.ControlHTTP+"/v1/jobs/"+slow.ID)
	require.NotNil(t, running.Progress)
	require.EqualValues(t, 50, *running.Progress)
	require.JSONEq(t, `{"stage": "waiting"}`, string(running.Metadata))
	type answer struct {
		job pulsehttp.Job
		err error
	}
	done := make(chan answer, 2)
	for _, id := range []string{slow.ID, queued.ID} {
		go func() {
			j, err := longPoll(ctx, f.ControlHTTP+"/v1/jobs/"+id+"?wait=5m")
			done <- answer{j, err}
		}()
	}
	waitForWaiters(t, ctx, f.ControlHTTP, 2)

	close(release)
	a := <-done
	require.NoError(t, a.err)
	finished := a.job
	require.Equal(t, slow.ID, finished.ID)
	require.Equal(t, "COMPLETED", finished.Status)
	require.JSONEq(t, `{"done": true}`, string(finished.Result))

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.ControlHTTP+"/v1/jobs/"+queued.ID+"/cancel", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	a = <-done
	require.NoError(t, a.err)
	finished = a.job
	require.Equal(t, queued.ID, finished.ID)
	require.Equal(t, "CANCELED", finished.Status)
	require.Empty(t, finished.Result)

	for _, bad := range []string{"?wait=soon", "?wait=10m", "?wait=0s", "?wait=1s&x=1"} {
		body := getBody(t, ctx, f.ControlHTTP+"/v1/jobs/"+queued.ID+bad, http.StatusBadRequest)
		require.Contains(t, body, `"field"`, bad)
	}
	getBody(t, ctx, f.ControlHTTP+"/v1/jobs/0190a7b4-0000-7000-8000-000000000000?wait=1s", http.StatusNotFound)
}

func getJob(t *testing.T, ctx context.Context, url string) pulsehttp.Job {
	t.Helper()
	var out pulsehttp.JobWithWait
	require.NoError(t, json.Unmarshal([]byte(getBody(t, ctx, url, http.StatusOK)), &out))
	return out.Job
}

// longPoll is GET url answered 200, from any goroutine.
func longPoll(ctx context.Context, url string) (pulsehttp.Job, error) {
	var out pulsehttp.JobWithWait
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return out.Job, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out.Job, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return out.Job, err
	}
	if resp.StatusCode != http.StatusOK {
		return out.Job, fmt.Errorf("%s: %d %s", url, resp.StatusCode, body)
	}
	err = json.Unmarshal(body, &out)
	return out.Job, err
}

func getBody(t *testing.T, ctx context.Context, url string, want int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, want, resp.StatusCode, "%s: %s", url, body)
	return string(body)
}

// waitForWaiters waits until control-api's pulse_job_waiters reaches n.
func waitForWaiters(t *testing.T, ctx context.Context, controlHTTP string, n int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, metricValue(t, ctx, controlHTTP+"/metrics", "pulse_job_waiters"), float64(n))
	}, proctest.Patience, 10*time.Millisecond)
}

// metricValue reads an unlabelled gauge from a /metrics page (-1: absent).
func metricValue(t *testing.T, ctx context.Context, url, name string) float64 {
	t.Helper()
	body := getBody(t, ctx, url, http.StatusOK)
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return -1
}
