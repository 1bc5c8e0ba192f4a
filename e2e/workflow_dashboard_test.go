package e2e_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
)

// hostileError is what the failing step's handler returns: text that
// would run script if the page wrote it unescaped.
const hostileError = `</svg><img src=x onerror="document.title='pwned'"><script>document.title='pwned'</script>`

// TestWorkflowPageInABrowser: a diamond workflow (A → B, C → D) whose B
// dead-letters with hostile error text, drawn by the dashboard in a real
// Chromium: four boxes in three layers coloured by state, the failed step
// named with its error shown as text, a box opening its job's page; the
// operator retries from the failed step and the workflow completes; a
// producer sees it without the controls.
func TestWorkflowPageInABrowser(t *testing.T) {
	t.Parallel()
	chromium := requireChromium(t)
	f := upPauseFleet(t, localfleet.Options{Gateways: 1, Env: map[string]string{
		"PULSE_AUTH_USERS": "alice:operator:alice-pw,pat:producer:pat-pw,wk:worker:wk-pw",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := f.newClient(pulse.WithUserPass("alice", "alice-pw"))
	shots := newScreenshots(t)

	// wfui.charge fails its first attempt for good, and succeeds when the
	// operator retries it.
	var mu sync.Mutex
	failed := map[string]bool{}
	f.startWorkers([]string{"wfui.fetch", "wfui.charge", "wfui.email", "wfui.ship"}, 1, 4, func(_ context.Context, job *pulse.Job) error {
		if job.Topic != "wfui.charge" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if !failed[job.ID] {
			failed[job.ID] = true
			return pulse.Permanent(errors.New(hostileError))
		}
		return nil
	}, pulse.WithUserPass("wk", "wk-pw"))

	sub, err := client.EnqueueMany(ctx, []pulse.JobRequest{
		{Topic: "wfui.fetch"},
		{Topic: "wfui.charge", Options: []pulse.EnqueueOption{pulse.DependsOn(pulse.JobRef(0))}},
		{Topic: "wfui.email", Options: []pulse.EnqueueOption{pulse.DependsOn(pulse.JobRef(0))}},
		{Topic: "wfui.ship", Options: []pulse.EnqueueOption{pulse.DependsOn(pulse.JobRef(1), pulse.JobRef(2))}},
	})
	require.NoError(t, err)
	a, b, c, d := sub[0].ID, sub[1].ID, sub[2].ID, sub[3].ID
	require.Eventually(t, func() bool {
		return f.count(`id = $1 AND status = 'DEAD_LETTERED'`, b) == 1 && f.count(`id = $1 AND status = 'CANCELED'`, d) == 1 &&
			f.count(`id = ANY($1::uuid[]) AND status = 'COMPLETED'`, []string{a, c}) == 2
	}, time.Minute, 20*time.Millisecond)

	// The SDK reads the same status the page draws.
	wf, err := client.Workflow(ctx, a)
	require.NoError(t, err)
	require.Equal(t, pulse.WorkflowFailed, wf.Status)
	require.NotNil(t, wf.FailedStep)
	require.Equal(t, b, wf.FailedStep.ID)
	require.Equal(t, hostileError, wf.FailedStep.Error)
	require.Equal(t, pulse.WorkflowCounts{Completed: 2, DeadLettered: 1, Canceled: 1, Total: 4}, wf.Counts)
	_, _, err = client.CancelWorkflow(ctx, a)
	require.ErrorContains(t, err, "cannot cancel workflow", "nothing is live")

	browser := startBrowser(t, ctx, chromium)
	page := f.ControlHTTP + "/ui/workflows/" + a
	op := browser.tab(t, "alice", "alice-pw")
	op.open(page)
	require.Equal(t, "failed", op.text("#workflow-status"))
	require.Equal(t, 4, op.count("#workflow-graph svg a.wf-node"))
	layer := func(id string) string { return op.attr(`a.wf-node[data-job="`+id+`"]`, "data-layer") }
	require.Equal(t, []string{"0", "1", "1", "2"}, []string{layer(a), layer(b), layer(c), layer(d)})
	fill := func(id string) string {
		return op.eval(`getComputedStyle(document.querySelector('a.wf-node[data-job="` + id + `"] rect')).fill`)
	}
	require.Equal(t, "rgb(218, 251, 225)", fill(a), "completed: green")
	require.Equal(t, "rgb(255, 228, 230)", fill(b), "dead-lettered: red")
	require.Equal(t, "rgb(246, 248, 250)", fill(d), "canceled: grey")
	require.Equal(t, 4, op.count("#workflow-graph path.wf-edge"))

	// The failed step, its hostile error shown as text: nothing ran.
	require.Contains(t, op.text("#failed-step"), "wfui.charge")
	require.Equal(t, hostileError, op.text("#failed-error"))
	require.Equal(t, 0, op.count("#workflow-graph img, #failed-step img, main script"))
	require.NotEqual(t, "pwned", op.eval(`document.title`))
	shots.take(op, "workflow")

	// A box opens its job's page, which links back.
	op.submit(chromedp.Click(chromedp.CSS(`a.wf-node[data-job="` + b + `"] rect`)))
	require.Equal(t, "/ui/jobs/"+b, op.eval(`location.pathname`))
	require.Equal(t, "/ui/workflows/"+a, op.attr("#workflow-link", "href"))

	// A producer sees the page but no controls.
	producer := browser.tab(t, "pat", "pat-pw")
	producer.open(page)
	require.Equal(t, "failed", producer.text("#workflow-status"))
	require.Equal(t, 0, producer.count("#workflow-retry, #workflow-cancel"))

	// Retry from the failed step: charge and ship come back, charge runs,
	// then ship; the workflow is done.
	op.open(page)
	op.submit(chromedp.Click(chromedp.ID("workflow-retry")))
	require.Contains(t, op.text("#flash"), "Retried 2 job(s) of workflow")
	require.Eventually(t, func() bool {
		return f.count(`workflow_id = $1 AND status = 'COMPLETED'`, a) == 4
	}, time.Minute, 20*time.Millisecond)
	var chargeDone, shipStarted time.Time
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT (SELECT finished_at FROM jobs WHERE id = $1), (SELECT started_at FROM jobs WHERE id = $2)`,
		b, d).Scan(&chargeDone, &shipStarted))
	require.False(t, shipStarted.Before(chargeDone), "ship started only after the retried charge completed")
	op.open(page)
	require.Equal(t, "done", op.text("#workflow-status"))
	wf, err = client.Workflow(ctx, a)
	require.NoError(t, err)
	require.Equal(t, pulse.WorkflowDone, wf.Status)
	require.Nil(t, wf.FailedStep)
	require.NotNil(t, wf.FinishedAt)
	require.Equal(t, 4, op.count(`#workflow-graph a.wf-node[data-status="COMPLETED"]`))
	require.Equal(t, 0, op.count("#workflow-retry, #workflow-cancel"))

	// The list finds it among the done.
	op.open(f.ControlHTTP + "/ui/workflows?status=done")
	require.Equal(t, 1, op.count(`#workflow-table tr[data-workflow="`+a+`"]`))
}
