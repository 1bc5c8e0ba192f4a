package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/config"
	gwconfig "github.com/pulsequeue/pulse/services/dispatch-gateway/internal/config"
)

func TestPresenceSettings(t *testing.T) {
	t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
	t.Setenv("PULSE_AUTH", "none")

	t.Run("DefaultsAreTenAndThirtySeconds", func(t *testing.T) {
		var cfg gwconfig.Config
		require.NoError(t, config.Load(&cfg))
		require.Equal(t, 10*time.Second, cfg.PresenceInterval)
		require.Equal(t, 30*time.Second, cfg.PresenceTTL)
	})

	t.Run("RefusesValuesNamingTheVariable", func(t *testing.T) {
		for _, c := range []struct{ interval, ttl, bad string }{
			{"5ms", "1s", "PULSE_PRESENCE_INTERVAL"},
			{"6m", "1h", "PULSE_PRESENCE_INTERVAL"},
			{"10s", "15s", "PULSE_PRESENCE_TTL"},
			{"10s", "2h", "PULSE_PRESENCE_TTL"},
		} {
			t.Setenv("PULSE_PRESENCE_INTERVAL", c.interval)
			t.Setenv("PULSE_PRESENCE_TTL", c.ttl)
			var cfg gwconfig.Config
			err := config.Load(&cfg)
			var ce *config.Error
			require.ErrorAs(t, err, &ce, "%+v", c)
			require.Equal(t, c.bad, ce.Var, "%+v", c)
		}
		t.Setenv("PULSE_PRESENCE_INTERVAL", "50ms")
		t.Setenv("PULSE_PRESENCE_TTL", "100ms")
		var cfg gwconfig.Config
		require.NoError(t, config.Load(&cfg), "twice the interval is enough")
	})
}

// The gateway id names its rows in job_throughput: one the table would
// refuse fails the start, naming the variable.
func TestGatewayID(t *testing.T) {
	t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
	t.Setenv("PULSE_AUTH", "none")
	for _, bad := range []string{strings.Repeat("g", 201), "gw\xff"} {
		t.Setenv("PULSE_GATEWAY_ID", bad)
		var cfg gwconfig.Config
		var ce *config.Error
		require.ErrorAs(t, config.Load(&cfg), &ce, "%q", bad)
		require.Equal(t, "PULSE_GATEWAY_ID", ce.Var)
	}
	t.Setenv("PULSE_GATEWAY_ID", strings.Repeat("g", 200))
	var cfg gwconfig.Config
	require.NoError(t, config.Load(&cfg))
	t.Setenv("PULSE_GATEWAY_ID", "")
	require.NoError(t, config.Load(&cfg))
	require.NotEmpty(t, cfg.GatewayID, "hostname-pid by default")
}

// PULSE_CLAIM_COOLDOWN: 5ms by default, 0 turns it off, and a negative or
// over-long value fails the start naming the variable.
func TestClaimCooldown(t *testing.T) {
	t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
	t.Setenv("PULSE_AUTH", "none")
	var cfg gwconfig.Config
	require.NoError(t, config.Load(&cfg))
	require.Equal(t, 5*time.Millisecond, cfg.ClaimCooldown)
	t.Setenv("PULSE_CLAIM_COOLDOWN", "0s")
	cfg = gwconfig.Config{}
	require.NoError(t, config.Load(&cfg))
	require.Zero(t, cfg.ClaimCooldown)
	for _, bad := range []string{"-1ms", "2s", "soon", "1e1000000h"} {
		t.Setenv("PULSE_CLAIM_COOLDOWN", bad)
		cfg = gwconfig.Config{}
		err := config.Load(&cfg)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "PULSE_CLAIM_COOLDOWN", bad)
	}
}

// PULSE_CLAIM_RESCAN_INTERVAL: 100ms by default, 0 makes every claim start
// from the head, and a negative or over-long value fails the start naming
// the variable.
func TestClaimRescanInterval(t *testing.T) {
	t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
	t.Setenv("PULSE_AUTH", "none")
	var cfg gwconfig.Config
	require.NoError(t, config.Load(&cfg))
	require.Equal(t, 100*time.Millisecond, cfg.ClaimRescanInterval)
	t.Setenv("PULSE_CLAIM_RESCAN_INTERVAL", "0s")
	cfg = gwconfig.Config{}
	require.NoError(t, config.Load(&cfg))
	require.Zero(t, cfg.ClaimRescanInterval)
	for _, bad := range []string{"-1ms", "2m", "often", "1e1000000h"} {
		t.Setenv("PULSE_CLAIM_RESCAN_INTERVAL", bad)
		cfg = gwconfig.Config{}
		err := config.Load(&cfg)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "PULSE_CLAIM_RESCAN_INTERVAL", bad)
	}
}
