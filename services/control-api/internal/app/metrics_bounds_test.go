package app_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
	"github.com/pulsequeue/pulse/services/control-api/internal/app"
	"github.com/pulsequeue/pulse/services/control-api/internal/config"
)

// startWith starts the whole control-api on cfg (over a fresh database),
// with credentials: a producer, a worker and an operator.
func startWith(t *testing.T, tweak func(*config.Config)) (*app.App, pulsev1.ControlServiceClient) {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("op-pass"), bcrypt.MinCost)
	require.NoError(t, err)
	cfg := config.Default()
	cfg.DatabaseURL = pgtest.URL(t)
	cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.AuthUsers = "prod:producer:prod-pass,op:operator:" + string(hash) + ",wk:worker:wk-pass"
	tweak(&cfg)
	require.NoError(t, cfg.Validate())
	a, err := app.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		require.NoError(t, a.Stop(context.Background()))
	})
	return a, pulsev1.NewControlServiceClient(conn)
}

// scrape GETs /metrics with authorization (none when empty) and returns
// the status and, on 200, the series per topic label value of each metric.
func scrape(t *testing.T, a *app.App, authorization string) (int, map[string]map[string]int) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+a.AdminAddr()+"/metrics", nil)
	require.NoError(t, err)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	out := map[string]map[string]int{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" {
					if out[name] == nil {
						out[name] = map[string]int{}
					}
					out[name][l.GetValue()]++
				}
			}
		}
	}
	return resp.StatusCode, out
}

func TestMetricsAreBoundedAndCanNeedCredentials(t *testing.T) {
	t.Parallel()
	const limit = 25
	a, client := startWith(t, func(c *config.Config) {
		c.MetricsMaxTopics = limit
		c.MetricsAuth = true
		c.DepthInterval = 20 * time.Millisecond
	})

	// A hostile producer submits 1,000 jobs, each to a topic of its own.
	specs := make([]*pulsev1.JobSpec, 1000)
	for i := range specs {
		specs[i] = &pulsev1.JobSpec{Topic: fmt.Sprintf("invented.%04d", i)}
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", authtest.Basic("prod", "prod-pass"))
	_, err := client.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{Jobs: specs})
	require.NoError(t, err)

	// /metrics needs credentials, of any role; the probes do not.
	code, _ := scrape(t, a, "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = scrape(t, a, authtest.Basic("prod", "wrong"))
	require.Equal(t, http.StatusUnauthorized, code)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + a.AdminAddr() + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}

	// The queue depth is recounted in the background: wait until it has
	// counted every job (the sum over its series), then count series.
	deadline := time.Now().Add(proctest.Patience)
	var series map[string]map[string]int
	for {
		code, series = scrape(t, a, authtest.Basic("wk", "wk-pass"))
		require.Equal(t, http.StatusOK, code, "a worker's credentials read /metrics")
		if series["pulse_queue_depth"][metrics.OtherTopic] > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "pulse_queue_depth never counted the jobs")
		time.Sleep(10 * time.Millisecond)
	}
	for _, name := range []string{"pulse_jobs_submitted_total", "pulse_queue_depth"} {
		require.LessOrEqual(t, len(series[name]), limit, "%s has %d topic label values", name, len(series[name]))
		require.Contains(t, series[name], metrics.OtherTopic, name)
	}
	require.Len(t, series["pulse_queue_depth"], limit)
	require.Equal(t, 3, series["pulse_queue_depth"][metrics.OtherTopic], "PENDING, RETRYING, RUNNING")
}
