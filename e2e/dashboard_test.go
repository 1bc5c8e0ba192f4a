package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/server/testtool"
)

// The dashboard as a person uses it (ADR-0009): the real control-api,
// gateway and SDK workers, driven in a real headless Chromium. Every wait
// is a liveness bound on something the page or the database shows; none
// asserts speed.

const (
	// EnvArtifacts is where tests write what a person may want to look at
	// afterwards (the dashboard's screenshots); default <repo>/.artifacts.
	EnvArtifacts = "PULSE_TEST_ARTIFACTS"
	// EnvDocsImages, when set to a directory (docs/img), also receives one
	// screenshot of each main page: how docs/dashboard.md's pictures are
	// made.
	EnvDocsImages = "PULSE_E2E_DOCS_IMG"
)

// TestDashboardInABrowser: an operator pauses from the dashboard and a
// second tab's banner turns amber by its own refresh; the drain panel
// turns "safe to upgrade" when the last running job finishes; the database
// records the operator as the actor; resume; cancel and retry a job; bulk
// retry of dead letters; disable a schedule; the audit log. A producer
// sees the state but no controls, and its posts are refused with 403.
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	chromium := requireChromium(t)
	f := upPauseFleet(t, localfleet.Options{Gateways: 1, Env: map[string]string{
		"PULSE_AUTH_USERS": "alice:operator:alice-pw,pat:producer:pat-pw,wk:worker:wk-pw",
		"PULSE_UI_REFRESH": "300ms",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	client := f.newClient(pulse.WithUserPass("alice", "alice-pw"))
	shots := newScreenshots(t)

	// ui.slow jobs run until released; ui.mail jobs fail their first
	// delivery (so, with one attempt, they dead-letter) and succeed when
	// retried; nobody works ui.idle.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll)
	var seenMu sync.Mutex
	seen := map[string]bool{}
	f.startWorkers([]string{"ui.slow", "ui.mail"}, 1, 8, func(ctx context.Context, job *pulse.Job) error {
		if job.Topic == "ui.slow" {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		seenMu.Lock()
		defer seenMu.Unlock()
		if !seen[job.ID] {
			seen[job.ID] = true
			return errors.New("smtp: 554 mailbox unavailable")
		}
		return nil
	}, pulse.WithUserPass("wk", "wk-pw"))
	f.enqueue(ctx, client, "ui.slow", 3)
	for range 2 {
		_, err := client.Enqueue(ctx, "ui.mail", map[string]string{"to": "ops@example.com"}, pulse.MaxAttempts(1))
		require.NoError(t, err)
	}
	idle, err := client.Enqueue(ctx, "ui.idle", map[string]any{"report": "weekly", "pages": 12}, pulse.Priority(7))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return f.count(`topic = 'ui.slow' AND status = 'RUNNING'`) == 3 && f.count(`topic = 'ui.mail' AND status = 'DEAD_LETTERED'`) == 2
	}, time.Minute, 20*time.Millisecond)
	require.Equal(t, http.StatusCreated, f.call(http.MethodPost, f.ControlHTTP+"/v1/schedules",
		`{"name":"nightly-digest","topic":"ui.idle","kind":"cron","expression":"0 3 * * *","time_zone":"Europe/Berlin"}`, "alice:alice-pw", nil))

	browser := startBrowser(t, ctx, chromium)
	ui := f.ControlHTTP + "/ui"
	op := browser.tab(t, "alice", "alice-pw")
	watcher := browser.tab(t, "alice", "alice-pw")
	producer := browser.tab(t, "pat", "pat-pw")

	// Both operator tabs open while dispatch runs.
	op.open(ui + "/")
	require.Equal(t, "running", op.attr("#banner", "data-state"))
	require.Contains(t, op.text("#banner-label"), "Workers: Running")
	shots.take(op, "overview-running")
	watcher.open(ui + "/jobs")
	require.Equal(t, "running", watcher.attr("#banner", "data-state"))
	shots.take(watcher, "jobs")

	// Pause from the dashboard, with a reason.
	op.do(
		chromedp.SetValue(chromedp.CSS(`#pause-form select[name="mode"]`), "drain"),
		chromedp.SendKeys(chromedp.CSS(`#pause-form input[name="reason"]`), "e2e: upgrading postgres"),
	)
	op.submit(chromedp.Click(chromedp.ID("pause-button")))
	require.Equal(t, "drain", op.attr("#banner", "data-state"))
	require.Contains(t, op.text("#flash"), "Paused all topics (drain): e2e: upgrading postgres")

	// The second tab's banner turns amber by its own refresh, no reload.
	watcher.waitFor(`#banner[data-state="drain"]`)
	require.Contains(t, watcher.text("#banner"), "Workers: Paused (Drain)")
	require.Contains(t, watcher.text("#banner"), "e2e: upgrading postgres")
	require.Contains(t, watcher.text("#banner"), "alice")
	require.Equal(t, "rgb(255, 241, 194)", watcher.eval(`getComputedStyle(document.getElementById("banner")).backgroundColor`), "amber")

	// The database holds the pause, with the operator as the actor.
	var paused bool
	var actor, reason string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT paused, actor, reason FROM dispatch_control WHERE scope = '*'`).Scan(&paused, &actor, &reason))
	require.True(t, paused)
	require.Equal(t, "alice", actor)
	require.Equal(t, "e2e: upgrading postgres", reason)

	// Drain: three jobs still run, then the last one finishes and the
	// panel says it is safe to upgrade, again by its own refresh.
	require.Equal(t, "3", op.text(`#drain tr[data-scope="*"] [data-running]`))
	require.Contains(t, op.text(`#drain tr[data-scope="*"]`), "3 still running")
	shots.take(op, "overview-draining")
	releaseAll()
	op.waitFor(`#drain tr[data-scope="*"] [data-safe]`)
	require.Equal(t, "0", op.text(`#drain tr[data-scope="*"] [data-running]`))
	require.Zero(t, f.count(`status = 'RUNNING'`))
	shots.take(op, "overview-paused")

	// A producer sees the state, no controls, and cannot post anyway.
	producer.open(ui + "/")
	require.Equal(t, "drain", producer.attr("#banner", "data-state"))
	require.Equal(t, "producer", producer.attr("#who", "data-role"))
	require.Equal(t, 0, producer.count(`#pause-form, [data-resume], form[method="post"]`))
	for _, path := range []string{"/dispatch/pause", "/dispatch/resume", "/jobs/" + idle.ID + "/cancel"} {
		require.Equal(t, http.StatusForbidden, producer.postForm(ui+path, "reason=producer was here"), path)
	}
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT paused, actor FROM dispatch_control WHERE scope = '*'`).Scan(&paused, &actor))
	require.True(t, paused, "the producer's resume changed nothing")
	require.Equal(t, "alice", actor)
	require.Equal(t, "PENDING", f.status(idle.ID))
	producer.open(ui + "/jobs/" + idle.ID)
	require.Equal(t, 0, producer.count(`#cancel-button, #retry-button`))

	// Resume from the drain panel; the second tab turns green.
	op.submit(chromedp.Click(chromedp.CSS(`button[data-resume="*"]`)))
	require.Equal(t, "running", op.attr("#banner", "data-state"))
	watcher.waitFor(`#banner[data-state="running"]`)
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT paused, actor FROM dispatch_control WHERE scope = '*'`).Scan(&paused, &actor))
	require.False(t, paused)
	require.Equal(t, "alice", actor)

	// Find the idle job by filtering, open it, cancel it and retry it.
	op.open(ui + "/jobs")
	op.do(chromedp.SendKeys(chromedp.CSS(`#job-filter input[name="topic"]`), "ui.idle"),
		chromedp.SetValue(chromedp.CSS(`#job-filter select[name="status"]`), "PENDING"))
	op.submit(chromedp.Click(chromedp.CSS(`#job-filter button`)))
	require.Equal(t, 1, op.count(`#job-table tr[data-job]`))
	op.submit(chromedp.Click(chromedp.CSS(`#job-table a[href="/ui/jobs/` + idle.ID + `"]`)))
	require.Contains(t, op.text("#waiting"), "no connected worker serves topic ui.idle")
	require.Contains(t, op.text("#args"), `"report": "weekly"`)
	shots.take(op, "job")
	op.submit(chromedp.Click(chromedp.ID("cancel-button")))
	require.Contains(t, op.text("#flash"), "Canceled job "+idle.ID)
	require.Equal(t, "CANCELED", f.status(idle.ID))
	op.submit(chromedp.Click(chromedp.ID("retry-button")))
	require.Contains(t, op.text("#flash"), "is queued again")
	require.Equal(t, "PENDING", f.status(idle.ID))

	// Dead letters: the error history, then retry both in bulk.
	op.open(ui + "/dead-letters")
	require.Equal(t, 2, op.count(`#dead-table tr[data-job]`))
	require.Contains(t, op.text("#dead-table"), "smtp: 554 mailbox unavailable")
	shots.take(op, "dead-letters")
	dead := op.attr(`#dead-table tr[data-job]`, "data-job")
	op.open(ui + "/jobs/" + dead)
	require.Contains(t, op.text("#errors"), "smtp: 554 mailbox unavailable")
	shots.take(op, "job-dead-lettered")
	op.open(ui + "/dead-letters")
	op.do(chromedp.Click(chromedp.ID("select-all")))
	op.submit(chromedp.Click(chromedp.ID("retry-selected")))
	require.Contains(t, op.text("#flash"), "Retried 2 job(s)")
	require.Eventually(t, func() bool { return f.count(`topic = 'ui.mail' AND status = 'COMPLETED'`) == 2 }, time.Minute, 20*time.Millisecond)

	// Schedules: the next fire time, and disable.
	op.open(ui + "/schedules")
	require.Contains(t, op.text(`tr[data-schedule="nightly-digest"]`), "Europe/Berlin")
	require.NotEmpty(t, op.attr(`tr[data-schedule="nightly-digest"] time`, "datetime"))
	shots.take(op, "schedules")
	op.submit(chromedp.Click(chromedp.CSS(`button[data-disable="nightly-digest"]`)))
	require.Contains(t, op.text("#flash"), "Disabled schedule nightly-digest")
	var enabled bool
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT enabled FROM schedules WHERE name = 'nightly-digest'`).Scan(&enabled))
	require.False(t, enabled)

	// The audit log: the pause and the resume, both alice's.
	op.open(ui + "/audit")
	require.Equal(t, 2, op.count(`#audit-table tr[data-event]`))
	require.Contains(t, op.text("#audit-table"), "e2e: upgrading postgres")
	shots.take(op, "audit")

	// Laptop and phone: nothing wider than the screen; on a phone the
	// tables turn into cards.
	op.open(ui + "/dead-letters")
	require.Equal(t, "true", op.eval(`String(document.documentElement.scrollWidth <= window.innerWidth)`), "laptop: no sideways scrolling")
	phone := browser.tab(t, "alice", "alice-pw")
	const phoneWidth = 390
	phone.do(chromedp.EmulateViewport(phoneWidth, 844, chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulateScale(2)))
	for _, path := range []string{"/", "/jobs", "/jobs/" + idle.ID, "/dead-letters", "/schedules", "/audit"} {
		phone.open(ui + path)
		// Against the device's width: a mobile browser widens its
		// viewport to fit content that overflows.
		require.Equal(t, strconv.Itoa(phoneWidth), phone.eval(`String(Math.max(document.documentElement.scrollWidth, window.innerWidth))`),
			"phone: %s scrolls sideways; too wide: %s", path, phone.eval(fmt.Sprintf(`Array.from(document.querySelectorAll("body *")).filter(e => e.getBoundingClientRect().right > %d).slice(0, 5).map(e => e.tagName + "." + e.className + " " + Math.round(e.getBoundingClientRect().right)).join("; ")`, phoneWidth)))
	}
	phone.open(ui + "/jobs")
	require.Equal(t, "none", phone.eval(`getComputedStyle(document.querySelector("table.cards thead")).display`))
	shots.take(phone, "phone-jobs")
	phone.open(ui + "/")
	shots.take(phone, "phone-overview")
}

// TestDashboardNumbersInABrowser: the overview's throughput chart shows
// the attempts a real fleet completed and failed, and refreshes in place;
// the topic table shows each topic's numbers; the jobs browser finds jobs
// by their args and cancels every job a filter matches after a
// confirmation that shows the count.
func TestDashboardNumbersInABrowser(t *testing.T) {
	t.Parallel()
	chromium := requireChromium(t)
	f := upPauseFleet(t, localfleet.Options{Gateways: 1, Env: map[string]string{
		"PULSE_AUTH_USERS": "alice:operator:alice-pw,wk:worker:wk-pw",
		"PULSE_UI_REFRESH": "300ms",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	client := f.newClient(pulse.WithUserPass("alice", "alice-pw"))
	shots := newScreenshots(t)

	// ui.orders complete; ui.flaky fail their one attempt and dead-letter;
	// nobody works ui.backlog, whose jobs wait.
	f.startWorkers([]string{"ui.orders", "ui.flaky"}, 1, 8, func(ctx context.Context, job *pulse.Job) error {
		if job.Topic == "ui.flaky" {
			return errors.New("upstream: 503 service unavailable")
		}
		return nil
	}, pulse.WithUserPass("wk", "wk-pw"))
	f.enqueue(ctx, client, "ui.orders", 12)
	for range 4 {
		_, err := client.Enqueue(ctx, "ui.flaky", map[string]string{"sku": "X-1"}, pulse.MaxAttempts(1))
		require.NoError(t, err)
	}
	backlog := make([]pulse.JobRequest, 0, 25)
	for i := range 25 {
		customer := "acme"
		if i%5 >= 3 {
			customer = "globex"
		}
		backlog = append(backlog, pulse.JobRequest{Topic: "ui.backlog", Args: map[string]any{"customer": customer, "invoice": 1000 + i}})
	}
	_, err := client.EnqueueMany(ctx, backlog)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return f.count(`topic = 'ui.orders' AND status = 'COMPLETED'`) == 12 && f.count(`topic = 'ui.flaky' AND status = 'DEAD_LETTERED'`) == 4
	}, time.Minute, 20*time.Millisecond)

	// The rollup: the gateway's report counts each settled attempt in
	// job_throughput in the statement that settles it. In a build whose
	// gateway does not write it yet, the test writes what the fleet did,
	// from the jobs themselves, as the report would have.
	var rolled int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM job_throughput WHERE topic IN ('ui.orders', 'ui.flaky')`).Scan(&rolled))
	if rolled == 0 {
		t.Log("no throughput rollup rows from the gateway: writing the fleet's counts from its jobs")
		_, err := f.pool.Exec(ctx, `
			INSERT INTO job_throughput (bucket, topic, writer, completed, failed, dead_lettered)
			SELECT date_trunc('minute', finished_at), topic, 'e2e-from-jobs',
			       count(*) FILTER (WHERE status = 'COMPLETED'),
			       count(*) FILTER (WHERE status = 'DEAD_LETTERED'),
			       count(*) FILTER (WHERE status = 'DEAD_LETTERED')
			FROM jobs WHERE topic IN ('ui.orders', 'ui.flaky') GROUP BY 1, 2`)
		require.NoError(t, err)
	}
	// An hour of earlier minutes, so the chart (and its picture in the
	// docs) has a shape: written as a second writer, and counted below.
	_, err = f.pool.Exec(ctx, `
		INSERT INTO job_throughput (bucket, topic, writer, completed, failed, dead_lettered)
		SELECT date_trunc('minute', now()) - m * interval '1 minute', 'ui.orders', 'e2e-history',
		       20 + (m * 7) % 15 + (CASE WHEN m BETWEEN 20 AND 28 THEN 25 ELSE 0 END),
		       CASE WHEN m % 9 = 0 THEN 4 WHEN m % 4 = 0 THEN 1 ELSE 0 END, 0
		FROM generate_series(1, 55) AS m`)
	require.NoError(t, err)
	var wantCompleted, wantFailed, wantDead int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT sum(completed), sum(failed), sum(dead_lettered) FROM job_throughput`).
		Scan(&wantCompleted, &wantFailed, &wantDead))
	require.GreaterOrEqual(t, wantCompleted, 12)
	require.GreaterOrEqual(t, wantFailed, 4)

	browser := startBrowser(t, ctx, chromium)
	ui := f.ControlHTTP + "/ui"
	op := browser.tab(t, "alice", "alice-pw")

	// The chart: one point per minute of the hour, the fleet's attempts
	// among them, with a title and description for screen readers.
	op.open(ui + "/")
	require.Equal(t, "1h", op.attr("#throughput figure", "data-range"))
	require.Equal(t, strconv.Itoa(wantCompleted), op.text("#total-completed"))
	require.Equal(t, strconv.Itoa(wantFailed), op.text("#total-failed"))
	require.Equal(t, "60", op.eval(`String(document.getElementById("line-completed").points.numberOfItems)`))
	require.Contains(t, op.eval(`document.getElementById("throughput-desc").textContent`), fmt.Sprintf("%d completed, %d failed (%d of them dead-lettered)", wantCompleted, wantFailed, wantDead))
	require.Equal(t, "throughput-title throughput-desc", op.attr("#throughput svg", "aria-labelledby"))
	require.NotEqual(t, "0", op.eval(`String(document.getElementById("line-completed").getBBox().height)`), "the line is drawn")

	// The topic table.
	require.Equal(t, "25", op.text(`tr[data-topic-row="ui.backlog"] [data-pending]`))
	require.NotEqual(t, "—", op.text(`tr[data-topic-row="ui.backlog"] [data-oldest]`), "the oldest waiting job's age")
	require.Equal(t, "0", op.text(`tr[data-topic-row="ui.backlog"] [data-workers]`))
	require.Equal(t, "4", op.text(`tr[data-topic-row="ui.flaky"] [data-dead]`))
	require.Equal(t, "4", op.text(`tr[data-topic-row="ui.flaky"] [data-failed]`))
	require.Equal(t, "1", op.text(`tr[data-topic-row="ui.orders"] [data-workers]`))
	shots.take(op, "overview-numbers")

	// The chart refreshes in place: attempts settled now show without a
	// reload.
	_, err = f.pool.Exec(ctx, `INSERT INTO job_throughput (bucket, topic, writer, completed) VALUES (date_trunc('minute', now()), 'ui.orders', 'e2e-live', 5)`)
	require.NoError(t, err)
	op.waitFor(fmt.Sprintf(`#throughput figure[data-completed="%d"]`, wantCompleted+5))

	// A longer range.
	op.submit(chromedp.Click(chromedp.CSS(`#throughput a[data-range="6h"]`)))
	require.Equal(t, "6h", op.attr("#throughput figure", "data-range"))
	require.Equal(t, "72", op.eval(`String(document.getElementById("line-completed").points.numberOfItems)`))

	// Find jobs by their args, then cancel every one of them.
	op.open(ui + "/jobs")
	op.do(chromedp.SendKeys(chromedp.CSS(`#job-filter input[name="topic"]`), "ui.backlog"),
		chromedp.SendKeys(chromedp.CSS(`#job-filter input[name="args"]`), `{"customer": "acme"}`))
	op.submit(chromedp.Click(chromedp.CSS(`#job-filter button`)))
	require.Equal(t, 15, op.count(`#job-table tr[data-job]`))
	first := op.attr(`#job-table tr[data-job]`, "data-job")
	require.Equal(t, first, op.attr(`#job-table tr[data-job] a.jobid`, "title"), "the full id on hover")
	require.Equal(t, "…"+first[len(first)-8:], op.text(`#job-table tr[data-job] a.jobid`))
	require.Equal(t, "nowrap", op.eval(`getComputedStyle(document.querySelector("#job-table a.jobid")).whiteSpace`))
	require.Equal(t, "1", op.eval(`String(document.querySelector("#job-table a.jobid").getClientRects().length)`), "the id is on one line")
	shots.take(op, "jobs-search")

	op.submit(chromedp.Click(chromedp.ID("bulk-cancel")))
	require.Equal(t, "15", op.attr("#bulk-count", "data-count"))
	require.Contains(t, op.text("#bulk-confirm-button"), "Cancel 15 job(s)")
	require.Equal(t, 25, f.count(`topic = 'ui.backlog' AND status = 'PENDING'`), "confirming is a separate step")
	shots.take(op, "bulk-confirm")
	op.submit(chromedp.Click(chromedp.ID("bulk-confirm-button")))
	require.Contains(t, op.text("#flash"), "Canceled 15 job(s)")
	require.Equal(t, 15, f.count(`topic = 'ui.backlog' AND status = 'CANCELED' AND args @> '{"customer": "acme"}'`))
	require.Equal(t, 10, f.count(`topic = 'ui.backlog' AND status = 'PENDING' AND args @> '{"customer": "globex"}'`))
	require.Contains(t, op.text("#job-table"), "CANCELED", "back on the same filter")
}

// requireChromium finds Debian's chromium; scripts/ensure-tools.sh
// installs it. Without it the test fails saying how to get it, unless the
// developer set PULSE_TEST_SKIP_TOOLS=chromium (pkg/server/testtool).
func requireChromium(t *testing.T) string {
	t.Helper()
	return testtool.Require(t, testtool.Chromium)
}

type testBrowser struct {
	ctx context.Context
}

// startBrowser starts one headless Chromium for the test; each tab is a
// window of its own, so every page stays visible and keeps refreshing.
func startBrowser(t *testing.T, ctx context.Context, path string) *testBrowser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1366, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	require.NoError(t, chromedp.Do(bctx), "start chromium")
	return &testBrowser{ctx: bctx}
}

// browserTab is one window signed in as one user: every request it makes
// (pages, the live refresh, form posts) carries the user's Basic
// credentials, as a browser does after its login prompt.
type browserTab struct {
	t   *testing.T
	ctx context.Context
}

func (b *testBrowser) tab(t *testing.T, user, pass string) *browserTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodGet, "http://x", nil)
	require.NoError(t, err)
	req.SetBasicAuth(user, pass)
	_, err = chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": req.Header.Get("Authorization")},
	})
	require.NoError(t, err)
	return &browserTab{t: t, ctx: ctx}
}

// bounded runs one step with a liveness bound, so a missing element fails
// the test with its selector instead of hanging it.
func (b *browserTab) bounded() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, 30*time.Second)
}

func (b *browserTab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := b.bounded()
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, steps...))
}

// open navigates and requires a 200.
func (b *browserTab) open(url string) {
	b.t.Helper()
	ctx, cancel := b.bounded()
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	require.NoError(b.t, err, url)
	require.Equal(b.t, int64(http.StatusOK), resp.Status, url)
}

// submit clicks a button or link that loads a page (a form's redirect
// included) and requires the page it lands on to answer 200.
//
// The live panels are re-rendered in place every refresh, so the node the
// selector found can be replaced between finding and clicking it ("Could
// not find node with given id"): nothing was clicked then, and the click is
// tried again on the new node.
func (b *browserTab) submit(sel chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := b.bounded()
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, sel)
	for try := 0; nodeReplaced(err) && try < 5; try++ {
		resp, err = chromedp.RunResponse(ctx, sel)
	}
	require.NoError(b.t, err)
	require.Equal(b.t, int64(http.StatusOK), resp.Status, resp.URL)
}

// nodeReplaced reports whether err says the node a selector found was
// replaced by the page's live refresh before it could be read or clicked
// (Chromium words it two ways). Nothing happened to the old node; the
// action is tried again on the new one.
func nodeReplaced(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "Could not find node") ||
		strings.Contains(err.Error(), "No node with given id"))
}

func (b *browserTab) waitFor(css string) {
	b.t.Helper()
	b.do(chromedp.WaitVisible(chromedp.CSS(css)))
}

// text is the visible text of the element css selects, read in one
// script run in the page: a node id held across two protocol calls can
// name a node the live refresh has just replaced, which reads as "" or as
// "No node with given id". It waits (bounded) for the element to exist.
func (b *browserTab) text(css string) string {
	b.t.Helper()
	return b.readElement(css, "e.innerText")
}

func (b *browserTab) attr(css, name string) string {
	b.t.Helper()
	return b.readElement(css, fmt.Sprintf("e.getAttribute(%q)", name))
}

// readElement evaluates expr with e bound to the first element css
// selects, once the element exists, and returns its string value.
func (b *browserTab) readElement(css, expr string) string {
	b.t.Helper()
	ctx, cancel := b.bounded()
	defer cancel()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e === null ? {found: false} : {found: true, value: %s}; })()`, css, expr)
	for {
		var res struct {
			Found bool    `json:"found"`
			Value *string `json:"value"`
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](js))
		require.NoError(b.t, err, css)
		require.NoError(b.t, json.Unmarshal(got, &res), css)
		if res.Found {
			require.NotNil(b.t, res.Value, "%s: %s is null", css, expr)
			return *res.Value
		}
		select {
		case <-ctx.Done():
			require.Fail(b.t, "no element matches "+css)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (b *browserTab) count(css string) int {
	b.t.Helper()
	ctx, cancel := b.bounded()
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", css)))
	require.NoError(b.t, err, css)
	return n
}

func (b *browserTab) eval(js string) string {
	b.t.Helper()
	ctx, cancel := b.bounded()
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	require.NoError(b.t, err, js)
	return s
}

// postForm posts a form body from the page with fetch, as a user who
// crafts the request by hand would, and returns the status.
func (b *browserTab) postForm(url, body string) int {
	b.t.Helper()
	ctx, cancel := b.bounded()
	defer cancel()
	js := fmt.Sprintf(`fetch(%q, {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: %q, redirect: "manual"}).then(r => r.status)`, url, body)
	code, err := chromedp.Run(ctx, chromedp.Evaluate[int](js, chromedp.EvalAwaitPromise))
	require.NoError(b.t, err)
	return code
}

// screenshots saves full-page PNGs as test artifacts, and into
// $PULSE_E2E_DOCS_IMG when set.
type screenshots struct {
	t       *testing.T
	dir     string
	docsDir string
}

func newScreenshots(t *testing.T) *screenshots {
	t.Helper()
	dir := os.Getenv(EnvArtifacts)
	if dir == "" {
		wd, err := os.Getwd()
		require.NoError(t, err)
		root, err := localfleet.FindRepoRoot(wd)
		require.NoError(t, err)
		dir = filepath.Join(root, ".artifacts")
	}
	dir = filepath.Join(dir, "dashboard")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return &screenshots{t: t, dir: dir, docsDir: os.Getenv(EnvDocsImages)}
}

func (s *screenshots) take(b *browserTab, name string) {
	s.t.Helper()
	ctx, cancel := b.bounded()
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(s.t, err, name)
	require.True(s.t, strings.HasPrefix(string(png), "\x89PNG"), "%s is not a PNG", name)
	require.NoError(s.t, os.WriteFile(filepath.Join(s.dir, name+".png"), png, 0o644))
	if s.docsDir != "" {
		require.NoError(s.t, os.WriteFile(filepath.Join(s.docsDir, "dashboard-"+name+".png"), png, 0o644))
	}
}
