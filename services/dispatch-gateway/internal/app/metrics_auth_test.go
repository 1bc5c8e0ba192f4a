package app_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/service"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/app"
	gwconfig "github.com/pulsequeue/pulse/services/dispatch-gateway/internal/config"
)

// Not parallel: the configuration is read from the environment.
func TestMetricsNeedCredentialsWhenAsked(t *testing.T) {
	t.Setenv("PULSE_DATABASE_URL", pgtest.URL(t))
	t.Setenv("PULSE_ADMIN_ADDR", "127.0.0.1:0")
	t.Setenv("PULSE_GRPC_ADDR", "127.0.0.1:0")
	t.Setenv("PULSE_AUTH_TOKENS", "scraper:worker:scrape-token")
	t.Setenv("PULSE_METRICS_AUTH", "true")
	var cfg gwconfig.Config
	require.NoError(t, config.Load(&cfg))
	s, err := service.New(t.Context(), app.Spec(cfg, slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	// The loops Start begins run until Stop in the cleanup, past the body.
	require.NoError(t, s.Start(context.WithoutCancel(t.Context())))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })

	get := func(path, authorization string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.AdminAddr()+path, nil)
		require.NoError(t, err)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get("/metrics", ""))
	require.Equal(t, http.StatusUnauthorized, get("/metrics", authtest.Bearer("wrong")))
	require.Equal(t, http.StatusOK, get("/metrics", authtest.Bearer("scrape-token")), "any role's credentials read /metrics")
	require.Equal(t, http.StatusOK, get("/healthz", ""), "the probes stay open")
	require.Equal(t, http.StatusOK, get("/readyz", ""))
}

func TestMetricsAuthNeedsAuthentication(t *testing.T) {
	t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
	t.Setenv("PULSE_AUTH", "none")
	t.Setenv("PULSE_METRICS_AUTH", "true")
	var cfg gwconfig.Config
	err := config.Load(&cfg)
	require.ErrorContains(t, err, "PULSE_METRICS_AUTH")
}
