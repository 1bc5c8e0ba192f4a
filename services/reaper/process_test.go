package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
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

	t.Run("BreakerPausesAFailingTopicAndLetsATrialThrough", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		pool, err := pgxpool.New(t.Context(), url)
		require.NoError(t, err)
		defer pool.Close()
		store := jobstore.New(pool, jobstore.ThroughputWriter("gw-test"))
		const topic = "proc.brk"
		_, err = store.SetTopicBreaker(t.Context(), topic, jobstore.BreakerConfig{
			FailureRatio: 0.5, Window: time.Minute, MinVolume: 3, Cooldown: time.Second}, "ops")
		require.NoError(t, err)

		p := proctest.Start(t, bin, proctest.Env("PULSE_DATABASE_URL="+url, "PULSE_BREAKER_INTERVAL=50ms", "PULSE_ADMIN_ADDR=127.0.0.1:0"))
		base := "http://" + adminAddr(t, p)
		p.WaitHTTP(t, base+"/readyz", http.StatusOK)

		// attempt submits a job, claims it and settles it with outcome.
		attempt := func(outcome pulsetype.Outcome) {
			t.Helper()
			id := uuid.Must(uuid.NewV7())
			_, err := store.Insert(t.Context(), []pulsetype.NewJob{{ID: id, Topic: topic, Args: []byte(`{}`), Priority: 5, MaxAttempts: 3}})
			require.NoError(t, err)
			var claimed []pulsetype.Claimed
			proctest.WaitFor(t, "a claim of the topic", func() bool {
				claimed, err = store.Claim(t.Context(), []string{topic}, []string{"w"}, time.Minute)
				require.NoError(t, err)
				return len(claimed) == 1
			})
			_, err = store.Report(t.Context(), "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: claimed[0].ID, Attempt: claimed[0].Attempt}, Outcome: outcome}})
			require.NoError(t, err)
		}
		for range 3 {
			attempt(pulsetype.OutcomeFail)
		}
		rec := p.Logged(t, "circuit breaker open")
		require.Equal(t, topic, rec["topic"])
		require.Contains(t, rec["why"], "3 of 3 attempts failed")
		st, err := store.DispatchState(t.Context())
		require.NoError(t, err)
		require.Equal(t, jobstore.BreakerActor, st.Scope(topic).Actor)
		proctest.WaitFor(t, "pulse_breaker_open to say open", func() bool {
			_, body := proctest.Get(base + "/metrics")
			return strings.Contains(body, `pulse_breaker_open{topic="proc.brk"} 1`)
		})

		// The cooldown ends (no control-api runs here: the breaker resumes
		// its own pause); the trial completes and closes it.
		p.Logged(t, "circuit breaker half_open")
		attempt(pulsetype.OutcomeComplete)
		p.Logged(t, "circuit breaker closed")
		proctest.WaitFor(t, "pulse_breaker_open to say closed", func() bool {
			_, body := proctest.Get(base + "/metrics")
			return strings.Contains(body, `pulse_breaker_open{topic="proc.brk"} 0`) &&
				strings.Contains(body, `pulse_breaker_transitions_total{to="closed",topic="proc.brk"} 1`)
		})
		p.Stop(t)
	})

	t.Run("RebuildsABloatedIndexAndSaysSo", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		pool, err := pgxpool.New(t.Context(), url)
		require.NoError(t, err)
		defer pool.Close()
		jobstoretest.BloatIndexes(t, pool, "proc.bloat", 60000, 500)
		var before int64
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT pg_relation_size('jobs_pkey')`).Scan(&before))

		p := proctest.Start(t, bin, proctest.Env("PULSE_DATABASE_URL="+url, "PULSE_ADMIN_ADDR=127.0.0.1:0",
			"PULSE_REINDEX_INTERVAL=1s", "PULSE_REINDEX_MIN_FREED_MB=1"))
		base := "http://" + adminAddr(t, p)
		rec := p.Logged(t, "rebuilt a bloated index")
		require.NotEmpty(t, rec["index"])
		proctest.WaitFor(t, "jobs_pkey rebuilt", func() bool {
			_, body := proctest.Get(base + "/metrics")
			return strings.Contains(body, `pulse_reaper_reindexes_total{index="jobs_pkey",result="ok"} 1`)
		})
		var after int64
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT pg_relation_size('jobs_pkey')`).Scan(&after))
		require.Less(t, after, before/4)
		_, body := proctest.Get(base + "/metrics")
		require.Contains(t, body, `pulse_reaper_index_bloat_ratio{index="jobs_pkey"}`)
		p.Stop(t)
		require.Contains(t, p.Stdout.String(), `"msg":"stopped cleanly"`)
	})

	t.Run("RefusesASchemaOlderThanItNeeds", func(t *testing.T) {
		t.Parallel()
		res := proctest.Run(t, bin, proctest.Env("PULSE_DATABASE_URL="+pgtest.EmptyURL(t), "PULSE_ADMIN_ADDR=127.0.0.1:0"))
		require.NotEqual(t, 0, res.Code)
		require.Contains(t, res.Stderr, fmt.Sprintf("needs version %d or newer", migrations.VersionTopicBreakers))
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
		for _, v := range []string{"PULSE_DATABASE_URL", "PULSE_SWEEP_INTERVAL", "PULSE_RETENTION_DEAD_LETTERED", "PULSE_RETRY_BACKOFF_UNIT", "PULSE_REINDEX_INTERVAL"} {
			require.Contains(t, out, v)
		}
	})
}
