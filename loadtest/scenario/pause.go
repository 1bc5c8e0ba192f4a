package scenario

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
)

// PauseParams shape the pause run.
type PauseParams struct {
	Workers     int
	Concurrency int
	Busy        time.Duration // the fleet's warm-up before the first pause
	// Pauses is how many pause/resume rounds to run: the scope (global or
	// one of two topics) and the mode (drain or quiesce) drawn at random.
	Pauses int
	Seed   uint64
}

// PauseUnderLoad keeps every gateway busy (producers submitting to two
// topics, workers with 1–3 ms handlers) and runs p.Pauses rounds of
// POST /v1/dispatch/pause, a short random hold, and resume. It judges by
// commit order (claimwitness): a claim of a paused scope that committed
// after the pause committed, before the scope was resumed, is a late
// commit. The answer must be zero. It also reports how long the Pause call
// took, which includes waiting out the claims in flight.
func PauseUnderLoad(ctx context.Context, t Target, p PauseParams) (Result, error) {
	pool, err := pgxpool.New(ctx, t.DatabaseURL)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	if err := claimwitness.Install(ctx, pool); err != nil {
		return Result{}, err
	}
	base := fmt.Sprintf("load.pause.%d", time.Now().UnixNano())
	topics := []string{base + ".a", base + ".b"}
	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	var ran atomic.Int64
	wg, err := startPulseWorkers(workCtx, t, topics, p.Workers, p.Concurrency, func(job *pulse.Job) {
		ran.Add(1)
		time.Sleep(time.Millisecond + time.Duration(len(job.ID)%3)*time.Millisecond) // the handler's work
	})
	if err != nil {
		return Result{}, err
	}
	defer wg.Wait()
	defer stop()
	client, err := pulse.NewClient(t.ControlGRPC)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	for _, topic := range topics {
		wg.Add(1)
		go func() { // producer: keep the queue full for the whole run
			defer wg.Done()
			for workCtx.Err() == nil {
				reqs := make([]pulse.JobRequest, 100)
				for i := range reqs {
					reqs[i] = pulse.JobRequest{Topic: topic}
				}
				if _, err := client.EnqueueMany(workCtx, reqs); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}

	time.Sleep(p.Busy)
	before := ran.Load()
	rng := rand.New(rand.NewPCG(p.Seed, 2))
	scopes := []string{"", topics[0], topics[1]}
	modes := []string{"drain", "quiesce"}
	var took []time.Duration
	perScope := map[string]int{}
	for i := range p.Pauses {
		scope, mode := scopes[rng.IntN(len(scopes))], modes[rng.IntN(2)]
		topicField := ""
		if scope != "" {
			topicField = fmt.Sprintf(`,"topic":%q`, scope)
		}
		start := time.Now()
		if err := post(ctx, t.ControlHTTP+"/v1/dispatch/pause",
			fmt.Sprintf(`{"reason":"loadtest: pause %d","mode":%q%s}`, i, mode, topicField)); err != nil {
			return Result{}, err
		}
		took = append(took, time.Since(start))
		perScope[map[bool]string{true: "global", false: "topic"}[scope == ""]+"_"+mode]++
		time.Sleep(time.Duration(5+rng.IntN(25)) * time.Millisecond)
		resume := "{}"
		if scope != "" {
			resume = fmt.Sprintf(`{"topic":%q}`, scope)
		}
		if err := post(ctx, t.ControlHTTP+"/v1/dispatch/resume", resume); err != nil {
			return Result{}, err
		}
		time.Sleep(time.Duration(5+rng.IntN(25)) * time.Millisecond)
	}
	stop()
	late, err := claimwitness.LateClaims(ctx, pool)
	if err != nil {
		return Result{}, err
	}
	claims, pauses, err := claimwitness.Counts(ctx, pool)
	if err != nil {
		return Result{}, err
	}
	p50, _, p99, worst := Percentiles(took)
	metrics := map[string]float64{
		"jobs_run_before_pauses": float64(before),
		"claims_witnessed":       float64(claims),
		"pauses":                 float64(pauses),
		"late_commits":           float64(len(late)),
		"pause_call_p50_ms":      p50,
		"pause_call_p99_ms":      p99,
		"pause_call_max_ms":      worst,
	}
	for k, n := range perScope {
		metrics["pauses_"+k] = float64(n)
	}
	return Result{
		Scenario: "pause",
		Params:   map[string]any{"workers": p.Workers, "concurrency": p.Concurrency, "gateways": len(t.GatewayAddrs), "pauses": p.Pauses, "seed": p.Seed},
		Metrics:  metrics,
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
