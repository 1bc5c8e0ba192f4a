package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// TestSchedulerReplicasFireEachOccurrenceOnce runs three real scheduler
// processes over one every-1s schedule, kills one with SIGKILL mid-run and
// restarts it, then disables the schedule (created and disabled through
// control-api's HTTP API): every occurrence from the first
// to the last produced exactly one job (no doubles; no gaps but the ones a
// fire reported skipping, when every replica was late), and nothing fires
// after the disable.
func TestSchedulerReplicasFireEachOccurrenceOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, err := localfleet.FindRepoRoot(".")
	require.NoError(t, err)
	// Only what this fleet runs: control-api, one gateway, the schedulers.
	bins, err := localfleet.Build(ctx, root, t.TempDir(), localfleet.ControlAPI, localfleet.DispatchGateway, localfleet.Scheduler)
	require.NoError(t, err)

	f := upFleet(t, localfleet.Options{Gateways: 1, Binaries: bins})
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()

	names := make([]string, 3)
	for i := range names {
		names[i] = startScheduler(t, f, bins[localfleet.Scheduler], i+1)
	}

	// Nothing consumes this topic, so every fired job stays PENDING with
	// next_run_at at its occurrence.
	resp, err := http.Post(f.ControlHTTP+"/v1/schedules", "application/json",
		strings.NewReader(`{"name":"replicas","topic":"sched.replicas","kind":"every","expression":"1s"}`))
	require.NoError(t, err)
	var created struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	id := created.ID

	fired := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE schedule_id = $1`, id).Scan(&n))
		return n
	}
	proctest.WaitFor(t, "the schedule to fire 3 times", func() bool { return fired() >= 3 })

	// kill -9 one replica mid-run, and bring it back.
	victim := f.Processes[len(f.Processes)-2]
	require.Equal(t, names[1], victim.Name)
	require.NoError(t, victim.Kill())
	require.ErrorContains(t, victim.Wait(proctest.Patience), "killed")
	proctest.WaitFor(t, "firing to go on with a replica down", func() bool { return fired() >= 5 })
	_, err = f.Restart(ctx, names[1])
	require.NoError(t, err)
	proctest.WaitFor(t, "firing to go on after the restart", func() bool { return fired() >= 9 })

	resp, err = http.Post(f.ControlHTTP+"/v1/schedules/"+id+"/disable", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var disabledAt time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&disabledAt))
	// A replica has seen the disable once a pass of its own counted no
	// enabled schedule (pulse_schedules, set at the end of every pass):
	// every pass after that starts after the disable committed. One fire
	// may have been in flight when it did, for an occurrence already due.
	for _, name := range names {
		proctest.WaitFor(t, name+" to count the schedule disabled", func() bool {
			_, body := proctest.Get(f.AdminURLs[name] + "/metrics")
			return strings.Contains(body, "\npulse_schedules{state=\"enabled\"} 0\n")
		})
	}
	// Two more occurrences have come due since: a schedule that kept
	// firing would have inserted them.
	proctest.WaitFor(t, "two occurrences to come due after the disable", func() bool {
		var past bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT now() > $1::timestamptz + interval '2 seconds'`, disabledAt).Scan(&past))
		return past
	})
	var latest time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(next_run_at) FROM jobs WHERE schedule_id = $1`, id).Scan(&latest))
	require.False(t, latest.After(disabledAt), "a disabled schedule fired the occurrence at %s, after the disable at %s", latest, disabledAt)

	rows, err := pool.Query(ctx, `SELECT id::text, next_run_at FROM jobs WHERE schedule_id = $1 ORDER BY next_run_at`, id)
	require.NoError(t, err)
	defer rows.Close()
	ids := map[string]bool{}
	var occ []time.Time
	for rows.Next() {
		var jid string
		var at time.Time
		require.NoError(t, rows.Scan(&jid, &at))
		require.False(t, ids[jid], "job id %s twice", jid)
		ids[jid] = true
		occ = append(occ, at)
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, len(occ), 8)
	skipped := skippedOccurrences(t, f, names, id)
	for i := 1; i < len(occ); i++ {
		gap := occ[i].Sub(occ[i-1])
		if gap > time.Second {
			// Every replica was down or stalled past the next occurrence
			// (a loaded machine can hold three processes for a second):
			// the schedule then fires its latest missed occurrence once,
			// not a burst, and the fire that skipped says so.
			from, ok := skipped[occ[i].UnixMilli()]
			require.True(t, ok, "occurrences %d and %d (%s, %s): a gap no scheduler reported skipping", i-1, i, occ[i-1], occ[i])
			require.Equal(t, occ[i-1].Add(time.Second).UnixMilli(), from,
				"the fire of %s skipped from the occurrence after %s", occ[i], occ[i-1])
			t.Logf("occurrences %s to %s skipped, reported by the fire of %s", occ[i-1].Add(time.Second), occ[i].Add(-time.Second), occ[i])
			continue
		}
		require.Equal(t, time.Second, gap, "occurrences %d and %d (%s, %s): a double", i-1, i, occ[i-1], occ[i])
	}
}

// skippedOccurrences reads every scheduler's log (each incarnation's: a
// restarted process appends to its log file) for the warning a fire logs
// when it skipped missed occurrences of schedule id ("schedule missed
// occurrences; fired the latest once", fire.MissedOccurrencesMsg), and
// returns the first skipped occurrence by the fired one (Unix ms).
func skippedOccurrences(t *testing.T, f *localfleet.Fleet, names []string, id string) map[int64]int64 {
	t.Helper()
	out := map[int64]int64{}
	for _, p := range f.Processes {
		if !slices.Contains(names, p.Name) {
			continue
		}
		data, err := os.ReadFile(p.LogPath)
		require.NoError(t, err)
		for _, line := range strings.Split(string(data), "\n") {
			var rec struct {
				Msg        string    `json:"msg"`
				ScheduleID string    `json:"schedule_id"`
				MissedFrom time.Time `json:"missed_from"`
				Occurrence time.Time `json:"occurrence"`
			}
			if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "schedule missed occurrences; fired the latest once" || rec.ScheduleID != id {
				continue
			}
			out[rec.Occurrence.UnixMilli()] = rec.MissedFrom.UnixMilli()
		}
	}
	return out
}

// startScheduler runs one scheduler replica against f; the fleet stops it
// with the rest. It returns its process name.
func startScheduler(t *testing.T, f *localfleet.Fleet, bin string, n int) string {
	t.Helper()
	port, err := localfleet.FreePort()
	require.NoError(t, err)
	admin := "127.0.0.1:" + strconv.Itoa(port)
	env := []string{"PULSE_DATABASE_URL=" + f.DatabaseURL, "PULSE_ADMIN_ADDR=" + admin}
	name := fmt.Sprintf("%s-%d", localfleet.Scheduler, n)
	p, err := localfleet.Start(t.Context(), name, bin, env, f.LogDir)
	require.NoError(t, err)
	f.Processes = append(f.Processes, p)
	f.AdminURLs[name] = "http://" + admin
	ctx, cancel := context.WithTimeout(context.Background(), localfleet.ReadyTimeoutDefault)
	defer cancel()
	require.NoError(t, localfleet.WaitHTTP(ctx, f.AdminURLs[name]+"/readyz"), "%s not ready:\n%s", name, p.Logs())
	return name
}
