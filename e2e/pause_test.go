package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
)

// The pause tests (docs/pause.md, ADR-0007): real control-api, real
// gateways, real SDK workers, the database as the witness. No assertion is
// about speed: every wait is a liveness bound on an event.

// TestPauseStopsEveryGatewayAndResumeWorksOffByPriority: two gateways with
// busy workers; once POST /v1/dispatch/pause returns, no job starts on
// either (no started_at after the pause), while submits land as PENDING,
// running jobs finish, the reaper reaps and the gateways issue no claim
// query at all; resume works off the backlog in priority order.
func TestPauseStopsEveryGatewayAndResumeWorksOffByPriority(t *testing.T) {
	t.Parallel()
	f := upPauseFleet(t, localfleet.Options{Gateways: 2, Reaper: true, Env: map[string]string{
		"PULSE_SWEEP_INTERVAL": "100ms", "PULSE_RETRY_BACKOFF_UNIT": "10ms",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	client := f.newClient()
	const topic = "e2e.pause"

	f.startWorkers([]string{topic}, 4, 4, func(ctx context.Context, job *pulse.Job) error {
		return pauseSleep(ctx, time.Duration(20+rand.IntN(31))*time.Millisecond)
	})
	prod := f.startProducer(ctx, client, topic, 5)

	// Busy: both gateways dispatching, jobs running.
	require.Eventually(t, func() bool { return f.count(`status = 'COMPLETED'`) >= 100 }, 2*time.Minute, 10*time.Millisecond)
	require.Eventually(t, func() bool { return f.count(`status = 'RUNNING'`) > 0 }, time.Minute, time.Millisecond)
	for name := range f.gatewayAdmins() {
		require.Positive(t, f.scrape(f.AdminURLs[name], `pulse_jobs_dispatched_total{topic="e2e.pause"}`), name)
	}

	var paused pauseResult
	status := f.call(http.MethodPost, f.ControlHTTP+"/v1/dispatch/pause", `{"reason":"e2e: database upgrade"}`, "", &paused)
	require.Equal(t, http.StatusOK, status)
	require.True(t, paused.Changed)
	pausedAt := f.now() // the pause has committed by now

	// Submits keep landing, as PENDING.
	landed := prod.count()
	require.Eventually(t, func() bool { return prod.count() >= landed+50 }, time.Minute, 10*time.Millisecond)
	// Running jobs finish and report: the fleet drains.
	require.Eventually(t, func() bool { return f.count(`status = 'RUNNING'`) == 0 }, time.Minute, 10*time.Millisecond)
	var st pauseStatus
	require.Equal(t, http.StatusOK, f.call(http.MethodGet, f.ControlHTTP+"/v1/dispatch", "", "", &st))
	require.True(t, st.Paused)
	require.Equal(t, "*", st.Scopes[0].Scope)
	require.True(t, st.Scopes[0].Drained)
	require.Positive(t, st.Scopes[0].Queued)

	// The reaper still reaps: an orphaned attempt's lease lapses.
	ghost := f.insertOrphan(topic)
	require.Eventually(t, func() bool { return f.status(ghost) == "RETRYING" }, time.Minute, 10*time.Millisecond)

	// Every gateway flipped its gate and keeps waking (NOTIFYs from the
	// submits, poll ticks) without issuing a single claim query.
	claims := map[string]float64{}
	for name, url := range f.gatewayAdmins() {
		require.Eventually(t, func() bool { return f.scrape(url, `pulse_dispatch_paused{scope="*"}`) == 1 }, time.Minute, 10*time.Millisecond, name)
		claims[name] = f.scrape(url, "pulse_claim_duration_seconds_count")
		woke := f.scrape(url, "pulse_dispatch_paused_wakeups_total")
		require.Eventually(t, func() bool { return f.scrape(url, "pulse_dispatch_paused_wakeups_total") >= woke+3 }, time.Minute, 10*time.Millisecond, name)
		require.Equal(t, claims[name], f.scrape(url, "pulse_claim_duration_seconds_count"), "%s claimed while paused", name)
	}
	prod.stop()

	// A backlog in the worst FIFO order for priority: lowest first.
	for _, prio := range []int{1, 9} {
		reqs := make([]pulse.JobRequest, 30)
		for i := range reqs {
			reqs[i] = pulse.JobRequest{Topic: topic, Args: map[string]int{"i": i}, Options: []pulse.EnqueueOption{pulse.Priority(prio)}}
		}
		_, err := client.EnqueueMany(ctx, reqs)
		require.NoError(t, err)
	}

	// The heart of it: nothing started after the pause, on either gateway.
	require.Zero(t, f.count(`started_at > $1`, pausedAt), "a job started after the pause committed")
	require.Zero(t, f.count(`status = 'RUNNING'`))

	resumedAt := f.now()
	_, changed, err := client.ResumeDispatch(ctx, "")
	require.NoError(t, err)
	require.True(t, changed)
	total := f.count(`true`)
	require.Eventually(t, func() bool { return f.count(`status = 'COMPLETED'`) == total }, 2*time.Minute, 20*time.Millisecond)
	require.Zero(t, f.count(`started_at > $1 AND started_at <= $2`, pausedAt, resumedAt))

	// Priority order through the ordinary claim: the first jobs to start
	// are the priority-9 ones, and a lower-priority job never started
	// while a higher one still waited. (Claims on two gateways overlap,
	// and started_at is each claim's transaction start, so the check is
	// stated per priority band: every job of a band was claimed before any
	// job of a lower band finished.)
	first := f.topStarted(resumedAt, 8)
	for _, p := range first {
		require.Equal(t, 9, p, "the first jobs started after resume: %v", first)
	}
	rows, err := f.pool.Query(ctx, `
		SELECT priority, max(started_at), min(finished_at) FROM jobs
		WHERE started_at > $1 GROUP BY priority ORDER BY priority DESC`, resumedAt)
	require.NoError(t, err)
	type band struct {
		prio                   int
		lastStart, firstFinish time.Time
	}
	var bands []band
	for rows.Next() {
		var b band
		require.NoError(t, rows.Scan(&b.prio, &b.lastStart, &b.firstFinish))
		bands = append(bands, b)
	}
	require.NoError(t, rows.Err())
	require.Len(t, bands, 3)
	for i := range bands {
		for j := i + 1; j < len(bands); j++ {
			require.True(t, bands[i].lastStart.Before(bands[j].firstFinish),
				"a priority-%d job started after a priority-%d job had finished", bands[i].prio, bands[j].prio)
		}
	}
}

// TestPerTopicPauseAndPauseSurvivesRestartingEveryGateway: a topic pause
// stops only that topic; a global pause holds across a restart of every
// gateway (and a gateway that cannot reach the database never becomes
// ready); every change is audited with the authenticated operator.
func TestPerTopicPauseAndPauseSurvivesRestartingEveryGateway(t *testing.T) {
	t.Parallel()
	f := upPauseFleet(t, localfleet.Options{Gateways: 2, Env: map[string]string{
		"PULSE_AUTH_USERS": "ops:operator:ops-secret,wk:worker:wk-secret",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	client := f.newClient(pulse.WithUserPass("ops", "ops-secret"))
	const a, b = "e2e.a", "e2e.b"
	f.startWorkers([]string{a, b}, 2, 4, func(ctx context.Context, job *pulse.Job) error {
		return pauseSleep(ctx, 20*time.Millisecond)
	}, pulse.WithUserPass("wk", "wk-secret"))

	// A worker's credentials cannot pause.
	require.Equal(t, http.StatusForbidden, f.call(http.MethodPost, f.ControlHTTP+"/v1/dispatch/pause", `{"reason":"x"}`, "wk:wk-secret", nil))

	require.Equal(t, http.StatusOK, f.call(http.MethodPost, f.ControlHTTP+"/v1/dispatch/pause",
		`{"reason":"vendor a is down","topic":"e2e.a"}`, "ops:ops-secret", nil))
	topicPausedAt := f.now()
	f.enqueue(ctx, client, a, 20)
	f.enqueue(ctx, client, b, 20)
	require.Eventually(t, func() bool { return f.count(`topic = $1 AND status = 'COMPLETED'`, b) == 20 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, 20, f.count(`topic = $1 AND status = 'PENDING'`, a))
	require.Zero(t, f.count(`topic = $1 AND started_at > $2`, a, topicPausedAt))

	_, changed, err := client.PauseDispatch(ctx, pulse.PauseRequest{Reason: "upgrading the gateways"})
	require.NoError(t, err)
	require.True(t, changed)
	pausedAt := f.now()

	// Restart every gateway. The first comes back once without a reachable
	// database: it must not become ready.
	for i, name := range []string{"dispatch-gateway-1", "dispatch-gateway-2"} {
		p := f.stopProcess(name)
		if i == 0 {
			bad := f.restartProcess(p, "PULSE_DATABASE_URL=postgres://pulse@127.0.0.1:1/pulse?connect_timeout=1")
			f.requireNotReady(f.AdminURLs[name]+"/readyz", bad)
			require.NoError(t, bad.Signal(syscall.SIGTERM))
			_ = bad.Wait(localfleet.StopTimeout) // it exits non-zero: it never started
			require.True(t, bad.Exited())
		}
		f.restartProcess(p)
		f.waitReady(f.AdminURLs[name] + "/readyz")
	}
	f.enqueue(ctx, client, b, 20)
	// The restarted gateways serve the workers again, primed paused, and
	// keep declining to claim.
	require.Eventually(t, func() bool {
		connected := 0.0
		for _, url := range f.gatewayAdmins() {
			connected += f.scrape(url, "pulse_gateway_connected_workers")
		}
		return connected == 2
	}, time.Minute, 10*time.Millisecond, "the workers reconnect")
	for name, url := range f.gatewayAdmins() {
		require.Eventually(t, func() bool {
			return f.scrape(url, `pulse_dispatch_paused{scope="*"}`) == 1 &&
				f.scrape(url, "pulse_dispatch_paused_wakeups_total") >= 5
		}, time.Minute, 10*time.Millisecond, name)
		require.Zero(t, f.scrape(url, "pulse_claim_duration_seconds_count"), name)
	}
	require.Zero(t, f.count(`started_at > $1`, pausedAt), "a job started while paused")

	_, _, err = client.ResumeDispatch(ctx, "")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.count(`topic = $1 AND status = 'COMPLETED'`, b) == 40 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, 20, f.count(`topic = $1 AND status = 'PENDING'`, a), "the topic pause still holds")
	_, _, err = client.ResumeDispatch(ctx, a)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.count(`topic = $1 AND status = 'COMPLETED'`, a) == 20 }, time.Minute, 10*time.Millisecond)

	var events struct {
		Events []struct{ Scope, Action, Mode, Reason, Actor string }
	}
	require.Equal(t, http.StatusOK, f.call(http.MethodGet, f.ControlHTTP+"/v1/dispatch/events", "", "ops:ops-secret", &events))
	var got []string
	for _, e := range events.Events {
		got = append(got, fmt.Sprintf("%s %s %s by %s", e.Action, e.Scope, e.Mode, e.Actor))
	}
	require.Equal(t, []string{
		"resume e2e.a drain by ops",
		"resume * drain by ops",
		"pause * drain by ops",
		"pause e2e.a drain by ops",
	}, got)
}

// TestQuiesceHoldsCheckpointsAndCancelReachesTheHandler: under a quiesce
// pause a handler that calls pulse.SafePoint holds there with its lease
// renewed, and carries on after resume; canceling a running job reaches
// its handler's context.
func TestQuiesceHoldsCheckpointsAndCancelReachesTheHandler(t *testing.T) {
	t.Parallel()
	f := upPauseFleet(t, localfleet.Options{Gateways: 1, Env: map[string]string{
		"PULSE_LEASE_TTL": "2s", "PULSE_HEARTBEAT_INTERVAL": "100ms",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	client := f.newClient()
	const topic = "e2e.quiesce"

	type progress struct {
		steps   atomic.Int64
		waiting atomic.Bool
		cause   chan error
	}
	var mu sync.Mutex
	jobs := map[string]*progress{}
	finish := make(chan struct{})
	handler := func(ctx context.Context, job *pulse.Job) error {
		mu.Lock()
		p := jobs[job.ID]
		if p == nil {
			p = &progress{cause: make(chan error, 1)}
			jobs[job.ID] = p
		}
		mu.Unlock()
		for {
			p.waiting.Store(true)
			err := pulse.SafePoint(ctx)
			p.waiting.Store(false)
			if err != nil {
				p.cause <- err
				return err
			}
			select {
			case <-finish:
				return nil
			case <-time.After(5 * time.Millisecond): // one step of work
			}
			p.steps.Add(1)
		}
	}
	f.startWorkers([]string{topic}, 1, 2, handler)
	held := f.enqueue(ctx, client, topic, 1)[0]
	doomed := f.enqueue(ctx, client, topic, 1)[0]
	get := func(id string) *progress {
		mu.Lock()
		defer mu.Unlock()
		return jobs[id]
	}
	require.Eventually(t, func() bool {
		return get(held) != nil && get(doomed) != nil && get(held).steps.Load() > 3 && get(doomed).steps.Load() > 3
	}, time.Minute, 5*time.Millisecond)

	require.Equal(t, http.StatusOK, f.call(http.MethodPost, f.ControlHTTP+"/v1/dispatch/pause",
		`{"reason":"e2e: hold at checkpoints","mode":"quiesce"}`, "", nil))

	// Held: the step count stops while the lease keeps being renewed
	// (lease_until moves on, beat after beat).
	for _, id := range []string{held, doomed} {
		p := get(id)
		lastSteps, lastLease, beats := int64(-1), time.Time{}, 0
		require.Eventually(t, func() bool {
			s, lease := p.steps.Load(), f.leaseUntil(id)
			if s != lastSteps {
				lastSteps, lastLease, beats = s, lease, 0
				return false
			}
			if lease.After(lastLease) {
				beats, lastLease = beats+1, lease
			}
			return beats >= 3 && p.waiting.Load()
		}, time.Minute, 20*time.Millisecond, "job %s did not hold at its checkpoint", id)
		require.Equal(t, "RUNNING", f.status(id))
	}

	// Cancel reaches the held handler: its checkpoint returns the cause.
	require.Equal(t, http.StatusOK, f.call(http.MethodPost, f.ControlHTTP+"/v1/jobs/"+doomed+"/cancel", "", "", nil))
	select {
	case err := <-get(doomed).cause:
		require.ErrorIs(t, err, pulse.ErrJobCanceled)
	case <-time.After(time.Minute):
		t.Fatal("cancel did not reach the handler")
	}

	// Resume: the held job carries on from where it stood and completes on
	// its first attempt.
	stood := get(held).steps.Load()
	require.Equal(t, http.StatusOK, f.call(http.MethodPost, f.ControlHTTP+"/v1/dispatch/resume", "", "", nil))
	require.Eventually(t, func() bool { return get(held).steps.Load() > stood+3 }, time.Minute, 5*time.Millisecond)
	close(finish)
	require.Eventually(t, func() bool { return f.status(held) == "COMPLETED" }, time.Minute, 10*time.Millisecond)
	require.Equal(t, 1, f.count(`id = $1 AND attempts = 1`, held))
	require.Equal(t, "CANCELED", f.status(doomed))
}

// --- helpers: methods of pauseFleet, so they cannot collide with other
// tests' helpers in this package ---

// pauseFleet is a fleet with a pool on its database, for the pause tests.
type pauseFleet struct {
	*localfleet.Fleet
	t    *testing.T
	pool *pgxpool.Pool
}

func upPauseFleet(t *testing.T, opts localfleet.Options) *pauseFleet {
	t.Helper()
	f := upFleet(t, opts)
	pool, err := pgxpool.New(context.Background(), f.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &pauseFleet{Fleet: f, t: t, pool: pool}
}

type pauseResult struct {
	Changed bool `json:"changed"`
}

type pauseStatus struct {
	Paused bool `json:"paused"`
	Scopes []struct {
		Scope   string `json:"scope"`
		Paused  bool   `json:"paused"`
		Queued  int64  `json:"queued"`
		Running int64  `json:"running"`
		Drained bool   `json:"drained"`
	} `json:"scopes"`
}

func (f *pauseFleet) newClient(opts ...pulse.ClientOption) *pulse.Client {
	f.t.Helper()
	c, err := pulse.NewClient(f.ControlGRPC, opts...)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { c.Close() })
	return c
}

// startWorkers runs n workers with the given concurrency, spread over the
// gateways, until the test ends.
func (f *pauseFleet) startWorkers(topics []string, n, concurrency int, h pulse.Handler, opts ...pulse.WorkerOption) {
	t := f.t
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		targets := make([]string, len(f.GatewayAddrs))
		for j := range targets {
			targets[j] = f.GatewayAddrs[(i+j)%len(f.GatewayAddrs)]
		}
		o := append([]pulse.WorkerOption{pulse.WithWorkerID(fmt.Sprintf("%s-w%d", t.Name(), i)), pulse.WithConcurrency(concurrency),
			pulse.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
		w, err := pulse.NewWorker(targets, o...)
		require.NoError(t, err)
		for _, topic := range topics {
			w.Register(topic, h)
		}
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })
}

// pauseProducer submits jobs one at a time until stopped.
type pauseProducer struct {
	n    atomic.Int64
	stop func()
}

func (p *pauseProducer) count() int64 { return p.n.Load() }

func (f *pauseFleet) startProducer(ctx context.Context, client *pulse.Client, topic string, prio int) *pauseProducer {
	t := f.t
	ctx, cancel := context.WithCancel(ctx)
	p := &pauseProducer{}
	var wg sync.WaitGroup
	// Two producers, each pausing 10 ms between submits: a steady load the
	// 16 slots keep up with, so the backlog a pause builds stays small.
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := client.Enqueue(ctx, topic, nil, pulse.Priority(prio)); err != nil {
					if ctx.Err() == nil {
						t.Errorf("enqueue: %v", err)
					}
					return
				}
				p.n.Add(1)
				_ = pauseSleep(ctx, 10*time.Millisecond)
			}
		})
	}
	var once sync.Once
	p.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(p.stop)
	return p
}

func (f *pauseFleet) enqueue(ctx context.Context, client *pulse.Client, topic string, n int) []string {
	f.t.Helper()
	reqs := make([]pulse.JobRequest, n)
	for i := range reqs {
		reqs[i] = pulse.JobRequest{Topic: topic, Args: map[string]int{"i": i}}
	}
	res, err := client.EnqueueMany(ctx, reqs)
	require.NoError(f.t, err)
	ids := make([]string, n)
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

func pauseSleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (f *pauseFleet) count(where string, args ...any) int {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE `+where, args...).Scan(&n))
	return n
}

func (f *pauseFleet) status(id any) string {
	f.t.Helper()
	var s string
	require.NoError(f.t, f.pool.QueryRow(context.Background(), `SELECT status FROM jobs WHERE id = $1`, id).Scan(&s))
	return s
}

func (f *pauseFleet) leaseUntil(id string) time.Time {
	f.t.Helper()
	var l *time.Time
	require.NoError(f.t, f.pool.QueryRow(context.Background(), `SELECT lease_until FROM jobs WHERE id = $1`, id).Scan(&l))
	if l == nil {
		return time.Time{}
	}
	return *l
}

// now is the database's clock.
func (f *pauseFleet) now() time.Time {
	f.t.Helper()
	var now time.Time
	require.NoError(f.t, f.pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now))
	return now
}

// topStarted is the priorities of the first n jobs started after since,
// ties (one claim statement) broken by priority.
func (f *pauseFleet) topStarted(since time.Time, n int) []int {
	f.t.Helper()
	rows, err := f.pool.Query(context.Background(), `
		SELECT priority FROM jobs WHERE started_at > $1 ORDER BY started_at, priority DESC LIMIT $2`, since, n)
	require.NoError(f.t, err)
	var out []int
	for rows.Next() {
		var p int
		require.NoError(f.t, rows.Scan(&p))
		out = append(out, p)
	}
	require.NoError(f.t, rows.Err())
	return out
}

// insertOrphan writes a RUNNING job whose worker vanished: its lease
// lapses a moment later, as a dead worker's does (a lease already lapsed
// when it became visible waits for the reaper's whole walk, ADR-0067). A
// job is born PENDING (migration 00005), so it is inserted and claimed in
// one transaction: no gateway sees it unclaimed.
func (f *pauseFleet) insertOrphan(topic string) uuid.UUID {
	f.t.Helper()
	id := uuid.Must(uuid.NewV7())
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO jobs (id, topic, max_attempts, submitted_at, next_run_at)
			VALUES ($1, $2, 3, now() - interval '2 minutes', now() - interval '2 minutes')`, id, topic); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			UPDATE jobs SET status = 'RUNNING', attempts = 1, locked_by = 'gone-worker',
			       lease_until = now() + interval '300 milliseconds', started_at = now() - interval '2 minutes'
			WHERE id = $1`, id)
		return err
	})
	require.NoError(f.t, err)
	return id
}

// call sends body (if any) with Basic credentials "user:pass" (if any),
// decodes a JSON answer into out (if not nil) and returns the status.
func (f *pauseFleet) call(method, url, body, creds string, out any) int {
	t := f.t
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if user, pass, ok := strings.Cut(creds, ":"); ok {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && resp.StatusCode < 300 {
		require.NoError(t, json.Unmarshal(raw, out), string(raw))
	}
	return resp.StatusCode
}

// gatewayAdmins maps each gateway process to its admin base URL.
func (f *pauseFleet) gatewayAdmins() map[string]string {
	out := map[string]string{}
	for name, url := range f.AdminURLs {
		if strings.HasPrefix(name, localfleet.DispatchGateway) {
			out[name] = url
		}
	}
	return out
}

// scrape reads one sample (name with its labels, exactly as exposed) from
// a /metrics page; a missing sample, or a process restarting, is 0.
func (f *pauseFleet) scrape(adminURL, sample string) float64 {
	resp, err := http.Get(adminURL + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			require.NoError(f.t, err, line)
			return v
		}
	}
	return 0
}

// stopProcess stops the named fleet process with SIGTERM and waits for a
// clean exit.
func (f *pauseFleet) stopProcess(name string) *localfleet.Process {
	f.t.Helper()
	for _, p := range f.Processes {
		if p.Name == name && !p.Exited() {
			require.NoError(f.t, p.Signal(syscall.SIGTERM))
			require.NoError(f.t, p.Wait(localfleet.StopTimeout), p.Logs())
			return p
		}
	}
	f.t.Fatalf("no running process %s", name)
	return nil
}

// restartProcess starts old's binary again with old's environment plus
// extra (later values win), in old's place in the fleet (so Down stops it).
func (f *pauseFleet) restartProcess(old *localfleet.Process, extra ...string) *localfleet.Process {
	f.t.Helper()
	env := append(append([]string(nil), old.Cmd.Env...), extra...)
	p, err := localfleet.Start(context.Background(), old.Name, old.Cmd.Path, env, f.LogDir)
	require.NoError(f.t, err)
	for i, q := range f.Processes {
		if q.Name == old.Name {
			f.Processes[i] = p
		}
	}
	return p
}

func (f *pauseFleet) waitReady(url string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(f.t, localfleet.WaitHTTP(ctx, url))
}

// requireNotReady checks that p, a gateway that cannot reach its database,
// stays alive and never answers /readyz with 200 while it retries: its log
// shows it kept trying (several failed attempts) the whole time.
func (f *pauseFleet) requireNotReady(url string, p *localfleet.Process) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			require.NotEqual(f.t, http.StatusOK, resp.StatusCode, "a gateway without its database became ready")
		}
		return strings.Count(p.Logs(), "database unreachable, retrying") >= 3
	}, time.Minute, 20*time.Millisecond)
	require.False(f.t, p.Exited(), "the gateway waits for its database rather than exiting")
}
