package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/server/testtool"
)

// grafanaVars replaces the Grafana variables the dashboards use with what
// Grafana would send for "All" at a short range.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "30s",
	"${__rate_interval}", "30s",
	"$__interval", "5s",
	"${topic}", ".*",
	"$topic", ".*",
)

// dashboardQuery is one panel target (or annotation) of one dashboard.
type dashboardQuery struct {
	where, expr string
}

// dashboardQueries returns every PromQL expression of every dashboard in
// deploy/grafana/dashboards: panel targets, nested row panels and
// annotations.
func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	root, err := localfleet.FindRepoRoot(".")
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(root, "deploy", "grafana", "dashboards", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	type panel struct {
		Title   string
		Targets []struct{ RefID, Expr string }
		Panels  []json.RawMessage
	}
	var out []dashboardQuery
	var walk func(file string, raw json.RawMessage)
	walk = func(file string, raw json.RawMessage) {
		var p panel
		require.NoError(t, json.Unmarshal(raw, &p))
		for _, tg := range p.Targets {
			out = append(out, dashboardQuery{fmt.Sprintf("%s: %q %s", filepath.Base(file), p.Title, tg.RefID), tg.Expr})
		}
		for _, c := range p.Panels {
			walk(file, c)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var d struct {
			Panels      []json.RawMessage
			Annotations struct {
				List []struct{ Name, Expr string }
			}
		}
		require.NoError(t, json.Unmarshal(b, &d), f)
		for _, p := range d.Panels {
			walk(f, p)
		}
		for _, a := range d.Annotations.List {
			if a.Expr != "" {
				out = append(out, dashboardQuery{fmt.Sprintf("%s: annotation %q", filepath.Base(f), a.Name), a.Expr})
			}
		}
	}
	return out
}

// TestDashboardsQueryRealPrometheus runs a fleet under a small load (an SDK
// producer and worker, one job lost to a killed worker and reaped, a few
// NotFound lookups), a real Prometheus scraping every service each second,
// and requires every dashboard query to parse and return data.
func TestDashboardsQueryRealPrometheus(t *testing.T) {
	t.Parallel()
	promBin := testtool.Require(t, testtool.Prometheus)
	queries := dashboardQueries(t)
	f := upChaosFleet(t, localfleet.Options{Reaper: true, Scheduler: true}, map[string]string{"PULSE_QUEUE_DEPTH_INTERVAL": "1s"})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)

	promURL := startPrometheus(t, promBin, f)

	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })

	// A job lost to a killed worker, for the reaper's metrics.
	const stuckTopic = "dash.stuck"
	victim := startWorker(t, f, workerSpec{ID: "dash-victim", Topic: stuckTopic, Gateways: f.GatewayAddrs,
		Hold: filepath.Join(t.TempDir(), "never")})
	stuck, err := client.Enqueue(ctx, stuckTopic, map[string]any{"n": 1})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, ok := victim.event(t, "start", stuck.ID, 1)
		return ok
	}, recoveryTimeout, 20*time.Millisecond, "the stuck job never started")
	victim.killHard(t)

	// A schedule firing every second, for the scheduler panels.
	sched, err := http.Post(f.ControlHTTP+"/v1/schedules", "application/json",
		strings.NewReader(`{"name":"dash-every-second","topic":"dash.scheduled","kind":"every","expression":"1s"}`))
	require.NoError(t, err)
	sched.Body.Close()
	require.Equal(t, http.StatusCreated, sched.StatusCode)

	// A paused topic nobody works on, for the paused panel and annotation.
	pause, err := http.Post(f.ControlHTTP+"/v1/dispatch/pause", "application/json",
		strings.NewReader(`{"reason":"e2e: dashboard paused panel","topic":"dash.paused"}`))
	require.NoError(t, err)
	pause.Body.Close()
	require.Equal(t, http.StatusOK, pause.StatusCode)

	// Steady load: a busy worker and a producer, plus lookups of a job that
	// does not exist (gRPC NotFound).
	const topic = "dash.work"
	w, err := pulse.NewWorker(f.GatewayAddrs, pulse.WithConcurrency(4),
		pulse.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	w.Register(topic, func(ctx context.Context, j *pulse.Job) error {
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	wctx, wcancel := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()
	pdone := make(chan struct{})
	go func() {
		defer close(pdone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			_, _ = client.Enqueue(wctx, topic, map[string]int{"n": i})
			if i%10 == 0 {
				_, _ = client.Get(wctx, "00000000-0000-4000-8000-000000000000")
			}
		}
	}()
	t.Cleanup(func() {
		wcancel()
		<-pdone
		<-werr //nolint:errcheck // the worker's result after cancel is not under test
	})

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		up, err := promQuery(ctx, promURL, "sum(up)")
		require.NoError(c, err)
		assert.Len(c, up, 1)
		if len(up) == 1 {
			assert.Equal(c, strconv.Itoa(len(f.AdminURLs)), up[0].Value[1], "every service scraped and up")
		}
	}, time.Minute, time.Second, "Prometheus never scraped every service")

	var empty []string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		empty = empty[:0]
		for _, q := range queries {
			expr := grafanaVars.Replace(q.expr)
			res, err := promQuery(ctx, promURL, expr)
			if !assert.NoError(c, err, "%s: %s", q.where, expr) {
				continue
			}
			if len(res) == 0 {
				empty = append(empty, q.where+": "+expr)
			}
		}
		assert.Empty(c, empty, "dashboard queries with no data")
	}, 2*time.Minute, 2*time.Second, "every dashboard query returns data")
	t.Logf("%d dashboard queries returned data", len(queries))

	// Alert rules: each expression must parse and evaluate. An alert that
	// is not firing has no samples, so only the evaluation is required.
	rules := alertRules(t)
	require.NotEmpty(t, rules)
	for _, r := range rules {
		_, err := promQuery(ctx, promURL, r.expr)
		require.NoError(t, err, "alert %s: %s", r.where, r.expr)
	}
	t.Logf("%d alert rules evaluated", len(rules))
}

// alertRules returns every alert expression in deploy/prometheus/alerts.yml.
func alertRules(t *testing.T) []dashboardQuery {
	t.Helper()
	root, err := localfleet.FindRepoRoot(".")
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	var out []dashboardQuery
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			out = append(out, dashboardQuery{where: r.Alert, expr: r.Expr})
		}
	}
	return out
}

// startPrometheus runs a real Prometheus scraping every service of f each
// second, and returns its base URL.
func startPrometheus(t *testing.T, bin string, f *localfleet.Fleet) string {
	t.Helper()
	dir := t.TempDir()
	names := make([]string, 0, len(f.AdminURLs))
	for name := range f.AdminURLs {
		names = append(names, name)
	}
	sort.Strings(names)
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n")
	for _, name := range names {
		u, err := url.Parse(f.AdminURLs[name])
		require.NoError(t, err)
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs:\n      - targets: [%q]\n", name, u.Host)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg.String()), 0o644))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	p, err := localfleet.Start(t.Context(), "prometheus", bin, nil, f.LogDir,
		"--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- prometheus log tail ---\n%s", lastLines(p.Logs(), 40))
		}
		_ = p.Kill()
		_ = p.Wait(10 * time.Second)
	})
	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 100*time.Millisecond, "prometheus never became ready")
	return base
}

// promSample is one element of an instant query's vector result.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// promQuery evaluates expr now through /api/v1/query; a parse error is an
// error.
func promQuery(ctx context.Context, base, expr string) ([]promSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string       `json:"resultType"`
			Result     []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("decode %s answer: %w", resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", body.ErrorType, body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", body.Data.ResultType)
	}
	return body.Data.Result, nil
}
