package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
)

// The chaos test's knobs: make test-long runs a short seeded form, make chaos a
// long one. PULSE_CHAOS_SEED replays a run (the seed is printed first).
const (
	envChaosDuration = "PULSE_CHAOS_DURATION"
	envChaosSeed     = "PULSE_CHAOS_SEED"
)

// TestChaos runs control-api, three gateways, the reaper and four worker
// processes under continuous submits over HTTP and gRPC, and for a bounded
// time kills a random component with SIGKILL every few seconds (restarting
// it, or starting a fresh worker), freezes one worker past its lease once,
// crashes Postgres once (immediate stop, crash recovery) and pauses and
// resumes dispatch now and then. Then it checks from outside: every job a
// producer had acknowledged completed, nothing is lost or stuck, no two
// live workers ran the same job at once, and no claim of a paused scope
// committed after its pause did.
func TestChaos(t *testing.T) {
	t.Parallel()
	duration := 15 * time.Second
	if v := os.Getenv(envChaosDuration); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "%s", envChaosDuration)
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envChaosSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "%s", envChaosSeed)
		seed = s
	}
	t.Logf("chaos seed %d (replay with %s=%d), duration %s", seed, envChaosSeed, seed, duration)
	rng := rand.New(rand.NewPCG(seed, 3))

	// Durable Postgres: the test crashes it, and a commit acknowledged
	// under synchronous_commit=off (the other tests' setting) may
	// legitimately be lost in a crash.
	f := upChaosFleet(t, localfleet.Options{Gateways: 3, Reaper: true, DurablePostgres: true}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), duration+5*time.Minute)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, claimwitness.Install(ctx, pool))
	const topic = "chaos.work"

	// Workers, each connected to every gateway; every keeps the killed
	// ones too, for their records.
	workers, every := map[string]*workerProcess{}, map[string]*workerProcess{}
	killedAt := map[string]time.Time{}
	var frozenFrom, frozenTo time.Time
	var frozenID string
	nextWorker := 0
	spawn := func() {
		nextWorker++
		id := fmt.Sprintf("chaos-w%d", nextWorker)
		gws := slices.Clone(f.GatewayAddrs)
		rng.Shuffle(len(gws), func(i, j int) { gws[i], gws[j] = gws[j], gws[i] })
		workers[id] = startWorker(t, f, workerSpec{ID: id, Topic: topic, Gateways: gws, Concurrency: 4, Work: 5 * time.Millisecond})
		every[id] = workers[id]
	}
	for range 4 {
		spawn()
	}

	// Producers: gRPC batches and HTTP singles. Only acknowledged ids are
	// promised; a submit that failed may or may not have landed.
	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	var ackMu sync.Mutex
	var acked []string
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	load.Go(func() {
		for loadCtx.Err() == nil {
			reqs := make([]pulse.JobRequest, 10)
			for i := range reqs {
				reqs[i] = pulse.JobRequest{Topic: topic}
			}
			if res, err := client.EnqueueMany(loadCtx, reqs); err == nil {
				ackMu.Lock()
				for _, r := range res {
					acked = append(acked, r.ID)
				}
				ackMu.Unlock()
			}
			_ = pauseSleep(loadCtx, 20*time.Millisecond)
		}
	})
	load.Go(func() {
		hc := &http.Client{Timeout: 5 * time.Second}
		for loadCtx.Err() == nil {
			resp, err := hc.Post(f.ControlHTTP+"/v1/jobs", "application/json", bytes.NewBufferString(`{"topic":"`+topic+`"}`))
			if err == nil {
				var out struct {
					ID string `json:"id"`
				}
				if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
					if json.NewDecoder(resp.Body).Decode(&out) == nil && out.ID != "" {
						ackMu.Lock()
						acked = append(acked, out.ID)
						ackMu.Unlock()
					}
				}
				resp.Body.Close()
			}
			_ = pauseSleep(loadCtx, 15*time.Millisecond)
		}
	})

	// Callers waiting for their jobs (Client.Wait: control-api's
	// long-poll, woken by the settle's NOTIFY) through every kill and the
	// Postgres crash: each must get its job back COMPLETED, with the
	// completing attempt's result.
	type waitedJob struct {
		id   string
		info *pulse.JobInfo
		err  error
	}
	var waitMu sync.Mutex
	var waitedJobs []waitedJob
	var waiters sync.WaitGroup
	waitCtx, stopWaiting := context.WithTimeout(ctx, duration+4*time.Minute)
	defer stopWaiting()
	load.Go(func() {
		for loadCtx.Err() == nil {
			if sub, err := client.Enqueue(loadCtx, topic, nil); err == nil {
				ackMu.Lock()
				acked = append(acked, sub.ID)
				ackMu.Unlock()
				waiters.Go(func() {
					info, err := client.Wait(waitCtx, sub.ID)
					waitMu.Lock()
					waitedJobs = append(waitedJobs, waitedJob{sub.ID, info, err})
					waitMu.Unlock()
				})
			}
			_ = pauseSleep(loadCtx, 100*time.Millisecond)
		}
	})

	// Workflows: random graphs of the same topic in one EnqueueMany each,
	// with random per-edge policies, and now and then an operator's cancel
	// of one of their jobs, so some parents end CANCELED mid-graph. The
	// database judges them after the run (checkWorkflows).
	var flowMu sync.Mutex
	var flows []string
	operatorCanceled := map[string]bool{}
	load.Go(func() {
		frng := rand.New(rand.NewPCG(seed, 7))
		for loadCtx.Err() == nil {
			reqs := make([]pulse.JobRequest, 2+frng.IntN(5))
			for i := range reqs {
				reqs[i] = pulse.JobRequest{Topic: topic}
				// Every job after the first has at least one parent, so
				// every job of the call is of its workflow.
				must := -1
				if i > 0 {
					must = frng.IntN(i)
				}
				for p := range i {
					if p == must || frng.IntN(3) == 0 {
						opt := pulse.DependsOn(pulse.JobRef(p))
						if frng.IntN(2) == 0 {
							opt = pulse.DependsOnAnyway(pulse.JobRef(p))
						}
						reqs[i].Options = append(reqs[i].Options, opt)
					}
				}
			}
			if res, err := client.EnqueueMany(loadCtx, reqs); err == nil {
				flowMu.Lock()
				flows = append(flows, res[0].ID)
				flowMu.Unlock()
				if frng.IntN(3) == 0 {
					victim := res[frng.IntN(len(res))].ID
					// Recorded before the call: a cancel whose answer was
					// lost may still have committed.
					flowMu.Lock()
					operatorCanceled[victim] = true
					flowMu.Unlock()
					_, _ = client.Cancel(loadCtx, victim)
				}
			}
			_ = pauseSleep(loadCtx, 50*time.Millisecond)
		}
	})

	// until retries op until it succeeds: components come back.
	until := func(what string, op func() error) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			err := op()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("chaos (seed %d): %s kept failing: %v", seed, what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	restart := func(name string) {
		p := fleetProcess(t, f, name)
		require.NoError(t, p.Kill())
		_ = p.Wait(10 * time.Second)
		_ = pauseSleep(ctx, time.Duration(200+rng.IntN(800))*time.Millisecond)
		until("restart "+name, func() error { _, err := f.Restart(ctx, name); return err })
	}
	pauseOnce := func() {
		scope := ""
		if rng.IntN(2) == 0 {
			scope = `,"topic":"` + topic + `"`
		}
		body := fmt.Sprintf(`{"reason":"chaos","mode":%q%s}`, []string{"drain", "quiesce"}[rng.IntN(2)], scope)
		// A pause that did not return success may still have committed:
		// the witness judges by what the database recorded either way.
		_ = postJSON(f.ControlHTTP+"/v1/dispatch/pause", body)
		_ = pauseSleep(ctx, time.Duration(100+rng.IntN(400))*time.Millisecond)
		resume := "{}"
		if scope != "" {
			resume = `{"topic":"` + topic + `"}`
		}
		until("resume", func() error { return postJSON(f.ControlHTTP+"/v1/dispatch/resume", resume) })
	}

	froze, crashed, paused := false, false, false
	end := time.Now().Add(duration)
	for round := 0; time.Now().Before(end); round++ {
		_ = pauseSleep(ctx, time.Duration(1500+rng.IntN(2000))*time.Millisecond)
		switch {
		case !froze && round >= 1:
			froze = true
			ids := sortedKeys(workers)
			frozenID = ids[rng.IntN(len(ids))]
			w := workers[frozenID]
			frozenFrom = time.Now()
			require.NoError(t, w.Signal(syscall.SIGSTOP))
			_ = pauseSleep(ctx, 4*time.Second) // twice the lease TTL
			require.NoError(t, w.Signal(syscall.SIGCONT))
			frozenTo = time.Now()
			t.Logf("chaos: froze %s for %s", frozenID, frozenTo.Sub(frozenFrom).Round(time.Millisecond))
		case !paused && round >= 2:
			paused = true
			pauseOnce()
			t.Logf("chaos: paused and resumed")
		case !crashed && round >= 3:
			crashed = true
			require.NoError(t, f.Cluster.Crash(ctx))
			_ = pauseSleep(ctx, 300*time.Millisecond)
			require.NoError(t, f.Cluster.Restart(ctx))
			t.Logf("chaos: crashed and restarted Postgres")
		default:
			switch k := rng.IntN(5); k {
			case 0:
				ids := sortedKeys(workers)
				victim := ids[rng.IntN(len(ids))]
				workers[victim].killHard(t)
				killedAt[victim] = time.Now()
				delete(workers, victim)
				spawn()
				t.Logf("chaos: killed worker %s", victim)
			case 1:
				restart("control-api")
				t.Logf("chaos: killed and restarted control-api")
			case 2:
				restart("reaper")
				t.Logf("chaos: killed and restarted the reaper")
			case 3:
				name := fmt.Sprintf("dispatch-gateway-%d", 1+rng.IntN(3))
				restart(name)
				t.Logf("chaos: killed and restarted %s", name)
			case 4:
				pauseOnce()
				t.Logf("chaos: paused and resumed")
			}
		}
	}
	stopLoad()
	load.Wait()

	// Everything acknowledged completes; nothing of the topic is stuck.
	ackMu.Lock()
	promised := slices.Clone(acked)
	ackMu.Unlock()
	require.NotEmpty(t, promised)
	require.Eventually(t, func() bool {
		return countWhere(t, ctx, pool, `topic = $1 AND workflow_id IS NULL AND status <> 'COMPLETED'`, topic) == 0
	}, 3*time.Minute, 100*time.Millisecond, "chaos (seed %d): jobs stuck: %d not COMPLETED", seed,
		countWhere(t, ctx, pool, `topic = $1 AND workflow_id IS NULL AND status <> 'COMPLETED'`, topic))
	flowMu.Lock()
	checkWorkflows(t, ctx, pool, seed, slices.Clone(flows), operatorCanceled)
	flowMu.Unlock()
	var missing int64
	require.NoError(t, pool.QueryRow(ctx, `
SELECT count(*) FROM unnest($1::uuid[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = a.id AND status = 'COMPLETED')`,
		promised).Scan(&missing))
	require.Zero(t, missing, "chaos (seed %d): acknowledged jobs lost", seed)

	// Every completion stored its result, and the result is the
	// completing attempt's: a reaped attempt's late report, carrying its
	// own result, never landed on the job (the report's fence), however
	// the gateways and workers died.
	var badResults int64
	require.NoError(t, pool.QueryRow(ctx, `
SELECT count(*) FROM jobs
WHERE topic = $1 AND status = 'COMPLETED'
  AND (result IS NULL OR (convert_from(result, 'UTF8')::jsonb ->> 'attempt')::int IS DISTINCT FROM attempts)`,
		topic).Scan(&badResults))
	require.Zero(t, badResults, "chaos (seed %d): completed jobs whose result is missing or not the completing attempt's", seed)

	waiters.Wait()
	require.NotEmpty(t, waitedJobs)
	for _, w := range waitedJobs {
		require.NoError(t, w.err, "chaos (seed %d): waiting for job %s", seed, w.id)
		require.Equal(t, "COMPLETED", string(w.info.Status), "chaos (seed %d): job %s", seed, w.id)
		var res struct{ Attempt int }
		require.NoError(t, w.info.UnmarshalResult(&res), "chaos (seed %d): job %s", seed, w.id)
		require.Equal(t, w.info.Attempts, res.Attempt, "chaos (seed %d): job %s: the waiter got the completing attempt's result", seed, w.id)
	}
	t.Logf("chaos: %d waiters got their jobs back, results included", len(waitedJobs))

	// No two live workers ran the same job at once. A run ends at its end
	// or cancel record, at its worker's kill, and a frozen worker is not
	// live while frozen.
	runs := map[string][]chaosRun{}
	for id, w := range every {
		collectRuns(t, w, runs, killedAt[id])
	}
	for job, rs := range runs {
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				a, b := rs[i].clipFrozen(frozenID, frozenFrom, frozenTo), rs[j].clipFrozen(frozenID, frozenFrom, frozenTo)
				if a.start.Before(b.end) && b.start.Before(a.end) {
					t.Errorf("chaos (seed %d): job %s ran on %s (attempt %d) and %s (attempt %d) at once", seed, job, a.worker, a.attempt, b.worker, b.attempt)
				}
			}
		}
	}

	late, err := claimwitness.LateClaims(ctx, pool)
	require.NoError(t, err)
	for _, l := range late {
		t.Errorf("chaos (seed %d): late claim: %s", seed, l)
	}
	claims, pauses, err := claimwitness.Counts(ctx, pool)
	require.NoError(t, err)
	t.Logf("chaos: %d jobs acknowledged, %d claims, %d pauses, %d workers started", len(promised), claims, pauses, nextWorker)
}

// checkWorkflows judges the chaos run's workflows from the database: every
// job of them finishes; no child started before each of its parents
// finished; a child whose parent ended CANCELED or DEAD_LETTERED under a
// cancel edge was canceled without running; a completed child had every
// parent finished and its cancel-edge parents completed; and a canceled job
// the test did not cancel has a failed parent under a cancel edge.
func checkWorkflows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, seed uint64, flows []string, operatorCanceled map[string]bool) {
	t.Helper()
	require.NotEmpty(t, flows, "chaos (seed %d): no workflow was submitted", seed)
	live := `workflow_id = ANY($1::uuid[]) AND status NOT IN ('COMPLETED', 'DEAD_LETTERED', 'CANCELED')`
	require.Eventually(t, func() bool { return countWhere(t, ctx, pool, live, flows) == 0 },
		3*time.Minute, 100*time.Millisecond, "chaos (seed %d): workflow jobs stuck: %d unfinished", seed, countWhere(t, ctx, pool, live, flows))

	var early, wrongCancel, wrongRun int64
	require.NoError(t, pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE c.started_at IS NOT NULL AND (p.finished_at IS NULL OR c.started_at < p.finished_at)),
       count(*) FILTER (WHERE d.on_parent_failure = 'cancel' AND p.status IN ('DEAD_LETTERED', 'CANCELED')
                          AND (c.status <> 'CANCELED' OR c.started_at IS NOT NULL)),
       count(*) FILTER (WHERE c.status = 'COMPLETED' AND d.on_parent_failure = 'cancel' AND p.status <> 'COMPLETED')
FROM job_dependencies d JOIN jobs c ON c.id = d.child_id JOIN jobs p ON p.id = d.parent_id
WHERE c.workflow_id = ANY($1::uuid[])`, flows).Scan(&early, &wrongCancel, &wrongRun))
	require.Zero(t, early, "chaos (seed %d): children started before a parent finished", seed)
	require.Zero(t, wrongCancel, "chaos (seed %d): children of a failed parent (cancel edge) not canceled before running", seed)
	require.Zero(t, wrongRun, "chaos (seed %d): children completed though a cancel-edge parent did not", seed)

	rows, err := pool.Query(ctx, `
SELECT c.id::text FROM jobs c
WHERE c.workflow_id = ANY($1::uuid[]) AND c.status = 'CANCELED'
  AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.parent_id
                  WHERE d.child_id = c.id AND d.on_parent_failure = 'cancel' AND p.status IN ('DEAD_LETTERED', 'CANCELED'))`, flows)
	require.NoError(t, err)
	unexplained, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, id := range unexplained {
		require.True(t, operatorCanceled[id], "chaos (seed %d): job %s canceled with no failed parent and no cancel by the test", seed, id)
	}
	var jobs, edges, canceled int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'CANCELED') FROM jobs WHERE workflow_id = ANY($1::uuid[])`, flows).Scan(&jobs, &canceled))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_dependencies d JOIN jobs c ON c.id = d.child_id WHERE c.workflow_id = ANY($1::uuid[])`, flows).Scan(&edges))
	t.Logf("chaos: %d workflows, %d jobs, %d edges, %d canceled (%d by the test), judged from the database", len(flows), jobs, edges, canceled, len(operatorCanceled))
}

// chaosRun is one handler run of one attempt, from its worker's record.
type chaosRun struct {
	worker     string
	attempt    int
	start, end time.Time
}

// collectRuns adds w's runs to runs, by job. A run with no end or cancel
// record ends when its worker was killed (or, if it was not, now).
func collectRuns(t *testing.T, w *workerProcess, runs map[string][]chaosRun, killed time.Time) {
	t.Helper()
	type attempt struct {
		job string
		n   int
	}
	open := map[attempt]int{} // -> index in runs[job]
	for _, e := range w.events(t) {
		key := attempt{e.Job, e.Attempt}
		switch e.Event {
		case "start":
			runs[e.Job] = append(runs[e.Job], chaosRun{worker: w.ID, attempt: e.Attempt, start: e.At})
			open[key] = len(runs[e.Job]) - 1
		case "end", "canceled":
			if i, ok := open[key]; ok {
				runs[e.Job][i].end = e.At
				delete(open, key)
			}
		}
	}
	stop := killed
	if stop.IsZero() {
		stop = time.Now()
	}
	for key, i := range open {
		runs[key.job][i].end = stop
	}
}

// clipFrozen: a worker is not live while frozen, and what its handler did
// after waking, with its lease long gone, is the at-least-once tail the
// fences make harmless — its run ends where the freeze began.
func (r chaosRun) clipFrozen(worker string, from, to time.Time) chaosRun {
	if r.worker == worker && r.start.Before(to) && r.end.After(from) {
		r.end = from
	}
	return r
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// postJSON posts body and wants a 2xx.
func postJSON(url, body string) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}
