package scenario

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// PauseParams shape the pause run.
type PauseParams struct {
	Workers     int
	Concurrency int
	Busy        time.Duration // each run of the fleet before and after the pause
}

// PauseUnderLoad keeps every gateway busy (producers submitting, workers
// with 1–3 ms handlers), calls POST /v1/dispatch/pause, and counts jobs
// whose started_at is later than the moment the call returned — on any
// replica. The answer must be zero.
func PauseUnderLoad(ctx context.Context, t Target, p PauseParams) (Result, error) {
	pool, err := pgxpool.New(ctx, t.DatabaseURL)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	topic := fmt.Sprintf("load.pause.%d", time.Now().UnixNano())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	workCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	var ran atomic.Int64
	for i := range p.Workers {
		w, err := pulse.NewWorker(rotate(t.GatewayAddrs, i), pulse.WithConcurrency(p.Concurrency), pulse.WithLogger(quiet))
		if err != nil {
			return Result{}, err
		}
		w.Register(topic, func(ctx context.Context, job *pulse.Job) error {
			ran.Add(1)
			time.Sleep(time.Millisecond + time.Duration(len(job.ID)%3)*time.Millisecond)
			return nil
		})
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(workCtx) }()
	}
	client, err := pulse.NewClient(t.ControlGRPC)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	wg.Add(1)
	go func() { // producer: keep the queue full for the whole run
		defer wg.Done()
		for workCtx.Err() == nil {
			reqs := make([]pulse.JobRequest, 200)
			for i := range reqs {
				reqs[i] = pulse.JobRequest{Topic: topic}
			}
			if _, err := client.EnqueueMany(workCtx, reqs); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	time.Sleep(p.Busy)
	before := ran.Load()
	if err := post(ctx, t.ControlHTTP+"/v1/dispatch/pause", `{"reason":"loadtest: pause under load"}`); err != nil {
		return Result{}, err
	}
	returned := time.Now()
	time.Sleep(p.Busy)
	var late, pending int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = $1 AND started_at > $2`, topic, returned).Scan(&late); err != nil {
		return Result{}, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = $1 AND status = 'PENDING'`, topic).Scan(&pending); err != nil {
		return Result{}, err
	}
	if err := post(ctx, t.ControlHTTP+"/v1/dispatch/resume", `{}`); err != nil {
		return Result{}, err
	}
	return Result{
		Scenario: "pause",
		Params:   map[string]any{"workers": p.Workers, "concurrency": p.Concurrency, "gateways": len(t.GatewayAddrs), "busy": p.Busy.String()},
		Metrics: map[string]float64{
			"jobs_run_before_pause":        float64(before),
			"jobs_started_after_pause_ret": float64(late),
			"pending_while_paused":         float64(pending),
		},
	}, nil
}

func post(ctx context.Context, url, body string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return nil
}
