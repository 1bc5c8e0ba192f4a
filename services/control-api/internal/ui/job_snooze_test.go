package ui_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// A snoozed job's page says it was snoozed and until when, and counts the
// attempts it spent, not its claims.
func TestJobPageShowsASnooze(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.insert(t, pulsetype.NewJob{Topic: "snz", MaxAttempts: 3})
	ctx := t.Context()
	for attempt := int32(1); attempt <= 2; attempt++ {
		claimed, err := tb.Store.Claim(ctx, []string{"snz"}, []string{"worker-1"}, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, attempt, claimed[0].Attempt)
		after := time.Duration(0)
		if attempt == 2 {
			after = time.Hour
		}
		acks, err := tb.Store.Report(ctx, "worker-1", []pulsetype.Result{{
			Ref: pulsetype.AttemptRef{ID: id, Attempt: attempt}, Outcome: pulsetype.OutcomeSnooze, RetryAfter: after,
		}})
		require.NoError(t, err)
		require.True(t, acks[0].Accepted, acks[0].Reason)
	}
	code, body := tb.browser(t, operatorAuth).get("/ui/jobs/" + id.String())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Snoozed by its handler until")
	require.Contains(t, body, "no attempt spent")
	require.Contains(t, body, "snoozed 2 times")
	require.NotContains(t, body, "2 of 3 made", "snoozed claims are not spent attempts")
}
