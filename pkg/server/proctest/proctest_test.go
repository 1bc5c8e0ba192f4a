package proctest_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

func TestRunReportsTheExitCodeAndOutput(t *testing.T) {
	t.Parallel()
	res := proctest.Run(t, "/bin/sh", proctest.Env("PULSE_X=1"), "-c", `echo "out $PULSE_X"; echo err >&2; exit 3`)
	require.Equal(t, 3, res.Code)
	require.Equal(t, "out 1\n", res.Stdout)
	require.Equal(t, "err\n", res.Stderr)
}

func TestEnvDropsTheMachinesPulseAndOTELVariables(t *testing.T) {
	t.Setenv("PULSE_AUTH_TOKENS", "machine:operator:secret")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
	env := strings.Join(proctest.Env("PULSE_AUTH=none"), "\n")
	require.NotContains(t, env, "PULSE_AUTH_TOKENS")
	require.NotContains(t, env, "OTEL_EXPORTER_OTLP_ENDPOINT")
	require.Contains(t, env, "OTEL_SDK_DISABLED=true")
	require.Contains(t, env, "PULSE_AUTH=none")
}

func TestStartReadsTheLogAndStops(t *testing.T) {
	t.Parallel()
	// A process that logs a JSON start line, then waits for SIGTERM and
	// exits 0 on it, as the services do.
	p := proctest.Start(t, "/bin/sh", proctest.Env(), "-c",
		`trap 'echo "{\"msg\":\"stopped cleanly\"}"; exit 0' TERM; echo '{"msg":"noise"}'; echo '{"msg":"running","admin_addr":"127.0.0.1:1"}'; while :; do sleep 0.05; done`)
	rec := p.Logged(t, "running")
	require.Equal(t, "127.0.0.1:1", rec["admin_addr"])
	p.Stop(t)
	require.Contains(t, p.Stdout.String(), "stopped cleanly")
	select {
	case <-p.Exited():
	default:
		t.Fatal("Stop returned before the process exited")
	}
}
