package scenario

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// IdleParams shape the idle-connections run.
type IdleParams struct {
	Workers int
	Window  time.Duration
	// GatewayAdmin is the admin base URL of the gateway the workers use.
	GatewayAdmin string
}

// IdleWorkers connects Workers idle workers to one gateway and measures,
// over Window, the claim statements that gateway issued and the
// transactions of the whole database (every service: an upper bound).
func IdleWorkers(ctx context.Context, t Target, p IdleParams) (Result, error) {
	topic := fmt.Sprintf("load.idle.%d", time.Now().UnixNano())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	workCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for range p.Workers {
		w, err := pulse.NewWorker([]string{t.GatewayAddrs[0]}, pulse.WithConcurrency(4), pulse.WithLogger(quiet))
		if err != nil {
			return Result{}, err
		}
		w.Register(topic, func(ctx context.Context, job *pulse.Job) error { return nil })
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(workCtx) }()
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := scrapeGauge(ctx, p.GatewayAdmin+"/metrics", "pulse_gateway_connected_workers")
		if err == nil && int(n) >= p.Workers {
			break
		}
		if time.Now().After(deadline) {
			return Result{}, fmt.Errorf("only %v of %d workers connected: %w", n, p.Workers, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Let the connection burst settle and reach the counters before the
	// window opens: each connect writes the worker's presence row, and
	// idle backends report those transactions to pg_stat_database up to
	// PGSTAT_IDLE_INTERVAL later (StatsSettle), which used to land them,
	// 1,000 of them, inside the window.
	time.Sleep(StatsSettle)

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
	claimsBefore, err := scrapeGauge(ctx, p.GatewayAdmin+"/metrics", "pulse_claim_duration_seconds_count")
	if err != nil {
		return Result{}, err
	}
	before, err := xacts()
	if err != nil {
		return Result{}, err
	}
	time.Sleep(p.Window)
	after, err := xacts()
	if err != nil {
		return Result{}, err
	}
	claimsAfter, err := scrapeGauge(ctx, p.GatewayAdmin+"/metrics", "pulse_claim_duration_seconds_count")
	if err != nil {
		return Result{}, err
	}
	// Our own two reads (and the clear-snapshot calls) are in the delta.
	rate := float64(after-before-4) / p.Window.Seconds()
	return Result{
		Scenario: "idle-workers",
		Params:   map[string]any{"workers": p.Workers, "window": p.Window.String(), "gateways_in_fleet": len(t.GatewayAddrs)},
		Metrics: map[string]float64{
			"db_xacts_per_s_whole_fleet": rate,
			// The loaded gateway's own statements: claims (counted by the
			// gateway) plus its pause-state refresh (one per
			// PULSE_PAUSE_REFRESH_INTERVAL, 1/s by default).
			"gateway_claims_per_s": (claimsAfter - claimsBefore) / p.Window.Seconds(),
		},
	}, nil
}

func scrapeGauge(ctx context.Context, url, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, name)), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}
