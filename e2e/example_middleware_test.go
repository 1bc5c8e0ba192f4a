package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
)

// TestMiddlewareExampleRuns builds examples/demo-middleware and runs it
// against a real fleet: its producer's tenant interceptor and its worker's
// logging, metrics, tenant and panic-policy middleware settle every job
// (done, failed, dead-lettered by a panic, timed out) and it exits 0.
func TestMiddlewareExampleRuns(t *testing.T) {
	t.Parallel()
	f := upFleet(t, localfleet.Options{Gateways: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	wd, err := os.Getwd()
	require.NoError(t, err)
	root, err := localfleet.FindRepoRoot(wd)
	require.NoError(t, err)
	bins, err := localfleet.Build(ctx, root, t.TempDir(), "demo-middleware")
	require.NoError(t, err)

	cmd := exec.CommandContext(ctx, bins["demo-middleware"])
	cmd.Env = append(os.Environ(),
		"PULSE_CONTROL_API_ADDR="+f.ControlGRPC,
		"PULSE_GATEWAY_ADDRS="+strings.Join(f.GatewayAddrs, ","),
		"PULSE_DEMO_JOBS=20")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	// 20 jobs: n%7==3 panics (3, 10, 17), n%5==4 times out (4, 9, 14, 19),
	// n%4==2 fails (2, 6, 18; 10 and 14 are taken above), the rest complete.
	require.Contains(t, string(out), "metrics: demo.mw.invoice: done=10 failed=3 permanent=3 timed_out=4;", "%s", out)
	require.Contains(t, string(out), `"tenant":"acme"`, "the logging middleware saw no tenant")
}
