package ui_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// A job waiting for its concurrency key's room, and one waiting for the
// job before it in its sequence, say so on their pages, the second naming
// that job.
func TestJobPageShowsKeyedWaits(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := t.Context()
	one := 1
	_, err := tb.Store.SetTopicKeyLimits(ctx, "kw", jobstore.KeyLimits{MaxRunningPerKey: &one, SequenceOnFailure: "block"}, "alice")
	require.NoError(t, err)
	first := tb.insert(t, pulsetype.NewJob{Topic: "kw", ConcurrencyKey: "acme"})
	second := tb.insert(t, pulsetype.NewJob{Topic: "kw", ConcurrencyKey: "acme"})
	claimed, err := tb.Store.Claim(ctx, []string{"kw"}, []string{"worker-1"}, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, first, claimed[0].ID)

	code, body := tb.browser(t, operatorAuth).get("/ui/jobs/" + second.String())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Its concurrency key is at its topic&#39;s cap: 1 of its jobs are running")

	head := tb.insert(t, pulsetype.NewJob{Topic: "kw", SequenceKey: "order-1"})
	next := tb.insert(t, pulsetype.NewJob{Topic: "kw", SequenceKey: "order-1"})
	code, body = tb.browser(t, operatorAuth).get("/ui/jobs/" + next.String())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Waiting for job "+head.String()+" of its sequence")
}
