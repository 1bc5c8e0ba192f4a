package app_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/service/servicetest"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/app"
	gwconfig "github.com/pulsequeue/pulse/services/dispatch-gateway/internal/config"
)

// Not parallel: the configuration is read from the environment, defaults
// and all, as the binary reads it.
func TestShutdownFlipsReadinessBeforeTheListenersClose(t *testing.T) {
	t.Setenv("PULSE_DATABASE_URL", pgtest.URL(t))
	t.Setenv("PULSE_ADMIN_ADDR", "127.0.0.1:0")
	t.Setenv("PULSE_GRPC_ADDR", "127.0.0.1:0")
	t.Setenv("PULSE_AUTH", "none")
	var cfg gwconfig.Config
	require.NoError(t, config.Load(&cfg))
	servicetest.RequireReadinessFlipsBeforeListenersClose(t, app.Spec(cfg, slog.New(slog.DiscardHandler)))
}
