package ui_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// A job's page tells its attempts and its worker in the tense of its
// status: running now, or ran; a job that completed after retries says on
// which attempt, after how many failures, listed as such.
func TestJobPageTellsAttemptsAndWorkerByStatus(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := t.Context()
	b := tb.browser(t, operatorAuth)
	page := func(id string) string {
		t.Helper()
		code, body := b.get("/ui/jobs/" + id)
		require.Equal(t, http.StatusOK, code, body)
		return body
	}
	claim := func(topic, worker string) pulsetype.Claimed {
		t.Helper()
		_, err := tb.Pool.Exec(ctx, `UPDATE jobs SET next_run_at = now() WHERE topic = $1 AND status = 'RETRYING'`, topic)
		require.NoError(t, err)
		claimed, err := tb.Store.Claim(ctx, []string{topic}, []string{worker}, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		return claimed[0]
	}
	report := func(c pulsetype.Claimed, worker string, outcome pulsetype.Outcome, msg string) {
		t.Helper()
		acks, err := tb.Store.Report(ctx, worker, []pulsetype.Result{{
			Ref: pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: outcome, Error: msg}})
		require.NoError(t, err)
		require.True(t, acks[0].Accepted, acks[0].Reason)
	}

	id := tb.insert(t, pulsetype.NewJob{Topic: "page.retried", MaxAttempts: 5, Timeout: 30 * time.Second})
	body := page(id.String())
	require.Contains(t, body, `<dd id="attempts">None yet of 5</dd>`)
	require.Contains(t, body, `<dd id="timeout">30s per attempt</dd>`)
	require.NotContains(t, body, `id="worker-label"`)

	first := claim("page.retried", "worker-a")
	body = page(id.String())
	require.Contains(t, body, `<dd id="attempts">Running attempt 1 of 5</dd>`)
	require.Contains(t, body, `<dt id="worker-label">Running on</dt>`)
	require.Contains(t, body, "Lease until")

	report(first, "worker-a", pulsetype.OutcomeFail, "smtp down")
	body = page(id.String())
	require.Contains(t, body, `<dd id="attempts">1 of 5 made, 1 failed; attempt 2 is next</dd>`)
	require.Contains(t, body, `<dt id="worker-label">Last attempt ran on</dt>`)
	require.NotContains(t, body, "Lease until")

	second := claim("page.retried", "worker-b")
	report(second, "worker-b", pulsetype.OutcomeFail, "smtp still down")
	third := claim("page.retried", "worker-c")
	report(third, "worker-c", pulsetype.OutcomeComplete, "")
	body = page(id.String())
	require.Contains(t, body, `<dd id="attempts">Completed on attempt 3 of 5, after 2 failed attempts</dd>`)
	require.Contains(t, body, `<dt id="worker-label">Ran on</dt><dd><code id="worker">worker-c</code></dd>`)
	require.NotContains(t, body, "Running on")
	require.NotContains(t, body, "Lease until")
	require.Contains(t, body, "Failed attempts before it completed")
	require.Contains(t, body, "smtp still down")

	// Completed at once: no failures to list.
	once := tb.insert(t, pulsetype.NewJob{Topic: "page.once"})
	report(claim("page.once", "worker-d"), "worker-d", pulsetype.OutcomeComplete, "")
	body = page(once.String())
	require.Contains(t, body, `<dd id="attempts">Completed on its first attempt (of 3 allowed)</dd>`)
	require.Contains(t, body, "No attempt failed.")
	require.Contains(t, body, `<dt id="worker-label">Ran on</dt>`)

	// Dead-lettered on its one attempt.
	dead := tb.deadLetter(t, "page.dead", "bad input")
	body = page(dead.String())
	require.Contains(t, body, `<dd id="attempts">Dead-lettered on attempt 1 of 1; 1 attempt failed</dd>`)
	require.Contains(t, body, `<dt id="worker-label">Last attempt ran on</dt>`)
}
