package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
)

// execution is one run of a handler, as the worker saw it.
type execution struct {
	job, worker string
	attempt     int
	start, end  time.Time
}

type recorder struct {
	mu   sync.Mutex
	runs []execution
}

func (r *recorder) add(e execution) {
	r.mu.Lock()
	r.runs = append(r.runs, e)
	r.mu.Unlock()
}

// TestFleetProcessesEveryJobOnce is the foundation's acceptance test: real
// control-api and two real dispatch-gateway processes, several SDK workers
// spread over both gateways, a few thousand jobs submitted over HTTP (single
// and batch) and gRPC (single and batch). Every job must end COMPLETED,
// exactly once, never running on two workers at once, and the worker that
// declared concurrency 2 must never hold more than 2 jobs.
func TestFleetProcessesEveryJobOnce(t *testing.T) {
	t.Parallel()
	f := upFleet(t, localfleet.Options{Gateways: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()

	const topic = "e2e.work"
	rec := &recorder{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Five workers: four with concurrency 8, one with concurrency 2, each on
	// a different gateway first.
	type workerSpec struct {
		id          string
		concurrency int
	}
	specs := []workerSpec{{"w-small", 2}, {"w-a", 8}, {"w-b", 8}, {"w-c", 8}, {"w-d", 8}}
	// The small worker hands a slot back before its result settles for at
	// most one result at a time, so it holds at most 2 + 1 leases.
	const smallSettleBehind = 1
	var maxSmall, runningSmall atomic.Int64
	workCtx, stopWorkers := context.WithCancel(ctx)
	var workersDone sync.WaitGroup
	for i, s := range specs {
		targets := []string{f.GatewayAddrs[i%2], f.GatewayAddrs[(i+1)%2]}
		opts := []pulse.WorkerOption{pulse.WithWorkerID(s.id), pulse.WithConcurrency(s.concurrency), pulse.WithLogger(logger)}
		if s.id == "w-small" {
			opts = append(opts, pulse.WithSettleBehind(smallSettleBehind))
		}
		w, err := pulse.NewWorker(targets, opts...)
		require.NoError(t, err)
		w.Register(topic, func(ctx context.Context, job *pulse.Job) error {
			start := time.Now()
			if s.id == "w-small" {
				n := runningSmall.Add(1)
				for {
					m := maxSmall.Load()
					if n <= m || maxSmall.CompareAndSwap(m, n) {
						break
					}
				}
				defer runningSmall.Add(-1)
			}
			time.Sleep(time.Duration(job.ID[len(job.ID)-1]%3) * time.Millisecond)
			rec.add(execution{job: job.ID, worker: s.id, attempt: job.Attempt, start: start, end: time.Now()})
			return nil
		})
		workersDone.Add(1)
		go func() {
			defer workersDone.Done()
			if err := w.Run(workCtx); err != nil {
				t.Errorf("worker %s: %v", s.id, err)
			}
		}()
	}

	// Watch the database: the concurrency-2 worker never holds more than
	// 2 + smallSettleBehind RUNNING rows.
	watchDone := make(chan int)
	go func() {
		maxHeld := 0
		for workCtx.Err() == nil {
			var held int
			if err := pool.QueryRow(workCtx, `SELECT count(*) FROM jobs WHERE status = 'RUNNING' AND locked_by = 'w-small'`).Scan(&held); err == nil && held > maxHeld {
				maxHeld = held
			}
			time.Sleep(2 * time.Millisecond)
		}
		watchDone <- maxHeld
	}()

	ids := submitMixed(t, ctx, f, topic)
	require.Len(t, ids, 3000)

	require.Eventually(t, func() bool {
		var done int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'COMPLETED'`).Scan(&done))
		return done == len(ids)
	}, 4*time.Minute, 50*time.Millisecond, "every job must complete")

	stopWorkers()
	workersDone.Wait()
	maxHeld := <-watchDone

	// Every submitted job is in the table exactly once, COMPLETED on its
	// first attempt, and nothing else is there.
	var total, firstTry int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE attempts = 1 AND status = 'COMPLETED') FROM jobs`).Scan(&total, &firstTry))
	require.Equal(t, len(ids), total)
	require.Equal(t, len(ids), firstTry)

	// Each job ran once, and no two runs of a job ever overlapped.
	byJob := map[string][]execution{}
	for _, e := range rec.runs {
		byJob[e.job] = append(byJob[e.job], e)
	}
	require.Len(t, byJob, len(ids))
	for id := range ids {
		runs := byJob[id]
		require.Len(t, runs, 1, "job %s ran %d times", id, len(runs))
		for i := range runs {
			for j := i + 1; j < len(runs); j++ {
				overlap := runs[i].start.Before(runs[j].end) && runs[j].start.Before(runs[i].end)
				require.False(t, overlap, "job %s ran on %s and %s at the same time", id, runs[i].worker, runs[j].worker)
			}
		}
	}
	perWorker := map[string]int{}
	for _, e := range rec.runs {
		perWorker[e.worker]++
	}
	t.Logf("runs per worker: %v", perWorker)
	require.LessOrEqual(t, maxSmall.Load(), int64(2), "the concurrency-2 worker ran more than 2 handlers at once")
	require.LessOrEqual(t, maxHeld, 2+smallSettleBehind, "the concurrency-2 worker held more RUNNING jobs than its slots and its results settling behind them")
	require.Greater(t, perWorker["w-small"], 0, "the small worker took part")
}

// submitMixed submits 3,000 jobs: 750 single HTTP posts, 750 in HTTP
// batches, 750 single gRPC calls and 750 in gRPC batches, all concurrently.
func submitMixed(t *testing.T, ctx context.Context, f *localfleet.Fleet, topic string) map[string]bool {
	t.Helper()
	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	defer client.Close()

	var mu sync.Mutex
	ids := map[string]bool{}
	record := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		if ids[id] {
			t.Errorf("submit returned id %s twice", id)
		}
		ids[id] = true
	}
	var wg sync.WaitGroup
	run := func(n int, fn func(i int)) {
		for g := range n {
			wg.Add(1)
			go func() { defer wg.Done(); fn(g) }()
		}
	}
	// HTTP singles: 10 goroutines × 75.
	run(10, func(g int) {
		for i := range 75 {
			body := fmt.Sprintf(`{"topic":%q,"args":{"src":"http","g":%d,"i":%d}}`, topic, g, i)
			resp, err := http.Post(f.ControlHTTP+"/v1/jobs", "application/json", bytes.NewBufferString(body))
			if err != nil {
				t.Errorf("POST /v1/jobs: %v", err)
				return
			}
			var out struct{ ID string }
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &out) != nil || out.ID == "" {
				t.Errorf("POST /v1/jobs: %d %s", resp.StatusCode, b)
				return
			}
			record(out.ID)
		}
	})
	// HTTP batches: 5 goroutines × 3 batches × 50.
	run(5, func(g int) {
		for b := range 3 {
			var jobs []map[string]any
			for i := range 50 {
				jobs = append(jobs, map[string]any{"topic": topic, "args": map[string]any{"src": "http-batch", "g": g, "b": b, "i": i}})
			}
			body, _ := json.Marshal(map[string]any{"jobs": jobs}) //nolint:errchkjson // the jobs are maps of strings and numbers built above
			resp, err := http.Post(f.ControlHTTP+"/v1/jobs:batch", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Errorf("POST /v1/jobs:batch: %v", err)
				return
			}
			var out struct{ Results []struct{ ID string } }
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || json.Unmarshal(raw, &out) != nil || len(out.Results) != 50 {
				t.Errorf("POST /v1/jobs:batch: %d %s", resp.StatusCode, raw)
				return
			}
			for _, r := range out.Results {
				record(r.ID)
			}
		}
	})
	// gRPC singles: 10 goroutines × 75.
	run(10, func(g int) {
		for i := range 75 {
			s, err := client.Enqueue(ctx, topic, map[string]any{"src": "grpc", "g": g, "i": i})
			if err != nil {
				t.Errorf("Enqueue: %v", err)
				return
			}
			record(s.ID)
		}
	})
	// gRPC batches: 5 goroutines × 3 batches × 50.
	run(5, func(g int) {
		for b := range 3 {
			reqs := make([]pulse.JobRequest, 50)
			for i := range reqs {
				reqs[i] = pulse.JobRequest{Topic: topic, Args: map[string]any{"src": "grpc-batch", "g": g, "b": b, "i": i}}
			}
			res, err := client.EnqueueMany(ctx, reqs)
			if err != nil {
				t.Errorf("EnqueueMany: %v", err)
				return
			}
			for _, r := range res {
				record(r.ID)
			}
		}
	})
	wg.Wait()
	return ids
}
