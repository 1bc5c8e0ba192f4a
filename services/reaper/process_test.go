package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
	"github.com/pulsequeue/pulse/services/reaper/internal/fixture"
)

// adminAddr waits for the "reaper running" log line and returns the admin
// address it names (the process picked a free port).
func adminAddr(t *testing.T, p *proctest.Process) string {
	t.Helper()
	rec := p.Logged(t, "reaper running")
	require.NotEmpty(t, rec["version"], "the start line names the build")
	require.NotEqual(t, "dev", rec["version"])
	addr, _ := rec["admin_addr"].(string)
	require.NotEmpty(t, addr)
	return addr
}

func TestReaperProcess(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, ".", "reaper")

	t.Run("ServesReapsAndExitsCleanlyOnSIGTERM", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		pool, err := pgxpool.New(t.Context(), url)
		require.NoError(t, err)
		defer pool.Close()

		// PULSE_RETRY_BACKOFF_UNIT writes the fleet's retry policy (the
		// retry_policy row) at start, and the sweep follows the row.
		p := proctest.Start(t, bin, proctest.Env("PULSE_DATABASE_URL="+url, "PULSE_SWEEP_INTERVAL=100ms", "PULSE_ADMIN_ADDR=127.0.0.1:0",
			"PULSE_RETRY_BACKOFF_UNIT=3m"))
		stdout := p.Stdout

		base := "http://" + adminAddr(t, p)
		p.WaitHTTP(t, base+"/readyz", http.StatusOK)
		code, _ := proctest.Get(base + "/healthz")
		require.Equal(t, http.StatusOK, code)

		id := fixture.Running(t, pool, fixture.RunningOpts{Topic: "proc.test", Worker: "worker-gone", LeaseIn: -time.Second})
		proctest.WaitFor(t, "the expired job to be reaped", func() bool {
			return fixture.Job(t, pool, id).Status == pulsetype.StatusRetrying
		})
		j := fixture.Job(t, pool, id)
		require.Len(t, j.Errors, 1)
		require.Equal(t, "worker-gone", j.Errors[0].Worker)
		require.WithinDuration(t, time.Now().Add(3*time.Minute), j.NextRunAt, time.Minute, "1² × the unit the reaper set")
		require.Contains(t, stdout.String(), "retry policy set from the environment")

		_, body := proctest.Get(base + "/metrics")
		require.Contains(t, body, `pulse_jobs_reaped_total{outcome="retried",topic="proc.test"} 1`)
		require.Contains(t, body, `pulse_reaper_sweep_duration_seconds_count`)
		require.Contains(t, body, `pulse_jobs_deleted_total{status="completed"}`)
		require.Contains(t, stdout.String(), `"worker_id":"worker-gone"`)

		p.Stop(t)
		require.Contains(t, stdout.String(), `"msg":"stopped cleanly"`)
	})

	t.Run("RefusesASchemaOlderThanItNeeds", func(t *testing.T) {
		t.Parallel()
		res := proctest.Run(t, bin, proctest.Env("PULSE_DATABASE_URL="+pgtest.EmptyURL(t), "PULSE_ADMIN_ADDR=127.0.0.1:0"))
		require.NotEqual(t, 0, res.Code)
		require.Contains(t, res.Stderr, fmt.Sprintf("needs version %d or newer", migrations.VersionSnooze))
	})

	t.Run("RefusesABadSweepIntervalNamingTheVariable", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"often", "-5s", "1ms"} {
			res := proctest.Run(t, bin, proctest.Env("PULSE_DATABASE_URL=postgres://127.0.0.1:1/none", "PULSE_SWEEP_INTERVAL="+v))
			require.NotEqual(t, 0, res.Code, "PULSE_SWEEP_INTERVAL=%s", v)
			require.Contains(t, res.Stderr, "PULSE_SWEEP_INTERVAL", "PULSE_SWEEP_INTERVAL=%s", v)
		}
	})

	t.Run("ListsItsVariablesOnHelp", func(t *testing.T) {
		t.Parallel()
		res := proctest.Run(t, bin, proctest.Env(), "-h")
		require.Equal(t, 0, res.Code, res.Stderr)
		out := res.Stdout
		for _, v := range []string{"PULSE_DATABASE_URL", "PULSE_SWEEP_INTERVAL", "PULSE_RETENTION_DEAD_LETTERED", "PULSE_RETRY_BACKOFF_UNIT"} {
			require.Contains(t, out, v)
		}
	})
}
