package ui_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// A job's page shows its own retry backoff, and nothing for a job that
// follows the schema's policy.
func TestJobPageShowsTheJobsRetryBackoff(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	b := tb.browser(t, operatorAuth)
	for want, r := range map[string]pulsetype.JobRetry{
		`<dd id="retry">2s doubling per attempt, at most 10m0s, jittered</dd>`:              {Base: 2 * time.Second, Max: 10 * time.Minute},
		`<dd id="retry">500ms doubling per attempt, at most the default cap, jittered</dd>`: {Base: 500 * time.Millisecond},
		`<dd id="retry">30s between attempts</dd>`:                                          {Fixed: 30 * time.Second},
		``: {},
	} {
		id := tb.insert(t, pulsetype.NewJob{Topic: "page.retry", MaxAttempts: 5, Retry: r})
		code, body := b.get("/ui/jobs/" + id.String())
		require.Equal(t, http.StatusOK, code, body)
		if want == "" {
			require.NotContains(t, body, `id="retry"`)
			continue
		}
		require.Contains(t, body, want)
	}
}
