package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/config/configtest"
	gwconfig "github.com/pulsequeue/pulse/services/dispatch-gateway/internal/config"
)

// These tests set environment variables, so they cannot run in parallel.

// env leaves the gateway a database, open auth and the pairs given, and
// nothing else the machine's environment holds.
func env(t *testing.T, pairs ...string) {
	t.Helper()
	configtest.Env(t, gwconfig.Config{}, append([]string{
		"PULSE_DATABASE_URL", "postgres://localhost/pulse", "PULSE_AUTH", "none"}, pairs...)...)
}

func load(t *testing.T) gwconfig.Config {
	t.Helper()
	var cfg gwconfig.Config
	require.NoError(t, config.Load(&cfg))
	return cfg
}

func TestPresenceSettings(t *testing.T) {
	t.Run("DefaultsAreTenAndThirtySeconds", func(t *testing.T) {
		env(t)
		cfg := load(t)
		require.Equal(t, 10*time.Second, cfg.PresenceInterval)
		require.Equal(t, 30*time.Second, cfg.PresenceTTL)
	})

	t.Run("RefusesValuesNamingTheVariable", func(t *testing.T) {
		for _, c := range []struct{ other, otherValue, bad, badValue string }{
			{"PULSE_PRESENCE_TTL", "1s", "PULSE_PRESENCE_INTERVAL", "5ms"},
			{"PULSE_PRESENCE_TTL", "1h", "PULSE_PRESENCE_INTERVAL", "6m"},
			{"PULSE_PRESENCE_INTERVAL", "10s", "PULSE_PRESENCE_TTL", "15s"},
			{"PULSE_PRESENCE_INTERVAL", "10s", "PULSE_PRESENCE_TTL", "2h"},
		} {
			env(t, c.other, c.otherValue)
			configtest.RequireRefused(t, gwconfig.Config{}, c.bad, c.badValue)
		}
		env(t, "PULSE_PRESENCE_INTERVAL", "50ms", "PULSE_PRESENCE_TTL", "100ms")
		load(t) // twice the interval is enough
	})
}

// The gateway id names its rows in job_throughput: one the table would
// refuse fails the start, naming the variable.
func TestGatewayID(t *testing.T) {
	env(t)
	for _, bad := range []string{strings.Repeat("g", 201), "gw\xff"} {
		configtest.RequireRefused(t, gwconfig.Config{}, "PULSE_GATEWAY_ID", bad)
	}
	env(t, "PULSE_GATEWAY_ID", strings.Repeat("g", 200))
	load(t)
	env(t)
	require.NotEmpty(t, load(t).GatewayID, "hostname-pid by default")
}

// PULSE_CLAIM_COOLDOWN (5ms by default) and PULSE_CLAIM_RESCAN_INTERVAL
// (100ms): 0 turns either off (no rest; every claim from the head), and a
// negative or over-long value fails the start naming the variable.
func TestClaimDurations(t *testing.T) {
	for _, tc := range []struct {
		envVar string
		def    time.Duration
		get    func(gwconfig.Config) time.Duration
		bad    []string
	}{
		{"PULSE_CLAIM_COOLDOWN", 5 * time.Millisecond,
			func(c gwconfig.Config) time.Duration { return c.ClaimCooldown }, []string{"-1ms", "2s", "soon", "1e1000000h"}},
		{"PULSE_CLAIM_RESCAN_INTERVAL", 100 * time.Millisecond,
			func(c gwconfig.Config) time.Duration { return c.ClaimRescanInterval }, []string{"-1ms", "2m", "often", "1e1000000h"}},
	} {
		t.Run(tc.envVar, func(t *testing.T) {
			env(t)
			require.Equal(t, tc.def, tc.get(load(t)))
			env(t, tc.envVar, "0s")
			require.Zero(t, tc.get(load(t)))
			for _, bad := range tc.bad {
				configtest.RequireRefused(t, gwconfig.Config{}, tc.envVar, bad)
			}
		})
	}
}

// PULSE_CLAIM_LANES: two claim loops by default (ADR-0064), at most
// MaxClaimLanes, and fewer than the pool's connections, so reports always
// find one.
func TestClaimLanes(t *testing.T) {
	env(t)
	require.Equal(t, gwconfig.ClaimLanesDefault, load(t).ClaimLanes)
	for _, bad := range []string{"0", "-1", "17", "two", "99999999999999999999"} {
		configtest.RequireRefused(t, gwconfig.Config{}, "PULSE_CLAIM_LANES", bad)
	}
	env(t, "PULSE_CLAIM_LANES", "16", "PULSE_DB_MAX_CONNS", "17")
	require.Equal(t, 16, load(t).ClaimLanes)
	env(t, "PULSE_CLAIM_LANES", "4")
	configtest.RequireRefused(t, gwconfig.Config{}, "PULSE_DB_MAX_CONNS", "4")
}
