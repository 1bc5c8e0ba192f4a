package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

func TestSchedulerProcess(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, ".", "scheduler")

	t.Run("ServesReadyzAndExitsCleanlyOnSIGTERM", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, bin, proctest.Env("PULSE_DATABASE_URL="+pgtest.URL(t), "PULSE_ADMIN_ADDR=127.0.0.1:0"))
		rec := p.Logged(t, "scheduler running")
		require.NotEmpty(t, rec["version"], "the start line names the build")
		require.NotEqual(t, "dev", rec["version"])
		addr, _ := rec["admin_addr"].(string)
		require.NotEmpty(t, addr)

		p.WaitHTTP(t, "http://"+addr+"/readyz", http.StatusOK)
		for _, path := range []string{"/healthz", "/metrics"} {
			code, _ := proctest.Get("http://" + addr + path)
			require.Equal(t, http.StatusOK, code, path)
		}
		require.Contains(t, p.Stdout.String(), "schedule loop started")

		p.Stop(t)
		require.Contains(t, p.Stdout.String(), `"msg":"stopped cleanly"`)
	})

	t.Run("RefusesASchemaOlderThanItNeeds", func(t *testing.T) {
		t.Parallel()
		res := proctest.Run(t, bin, proctest.Env("PULSE_DATABASE_URL="+pgtest.EmptyURL(t), "PULSE_ADMIN_ADDR=127.0.0.1:0"))
		require.NotEqual(t, 0, res.Code)
		require.Contains(t, res.Stdout+res.Stderr, fmt.Sprintf("needs version %d or newer", migrations.VersionConcurrencyKeys))
	})
}
