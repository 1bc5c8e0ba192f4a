package gwmetrics

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

func TestClaimErrorsAreCountedByReason(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, func() (int, int) { return 0, 0 })
	require.Equal(t, 3, testutil.CollectAndCount(reg, "pulse_gateway_claim_errors_total"),
		"every reason is exported from the start, at 0")

	refused := fmt.Errorf("claim: %w", &pgconn.PgError{Code: "23514", ConstraintName: "a_check"})
	m.Claimed(time.Millisecond, dispatch.ClaimFromHead, nil, refused)
	m.Claimed(time.Millisecond, dispatch.ClaimFromHead, nil, refused)
	m.Claimed(time.Millisecond, dispatch.ClaimFromHead, nil, apierr.Unavailable("claim", errors.New("connection refused")))
	m.Claimed(time.Millisecond, dispatch.ClaimFromHead, nil, context.DeadlineExceeded)
	m.Claimed(time.Millisecond, dispatch.ClaimFromHead, nil, nil)

	require.Equal(t, 2.0, testutil.ToFloat64(m.ClaimErrorsByReason.WithLabelValues("data")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.ClaimErrorsByReason.WithLabelValues("unavailable")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.ClaimErrorsByReason.WithLabelValues("other")))
	require.Equal(t, 4.0, testutil.ToFloat64(m.ClaimErrors), "the unlabelled total still counts every failed claim")
	require.Equal(t, 3, testutil.CollectAndCount(reg, "pulse_gateway_claim_errors_total"))
}

func TestClaimsAreCountedByWhereTheyStarted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, func() (int, int) { return 0, 0 })
	require.Equal(t, 4, testutil.CollectAndCount(reg, "pulse_gateway_claims_total"), "every start is exported from the start, at 0")
	require.Equal(t, 4, testutil.CollectAndCount(reg, "pulse_gateway_claimed_jobs_total"))
	require.Equal(t, 2, testutil.CollectAndCount(reg, "pulse_gateway_claimed_behind_cursor_total"), "rescans and lookbacks, at 0")
	three := []pulsetype.Claimed{{Topic: "t"}, {Topic: "t"}, {Topic: "t"}}
	m.Claimed(time.Millisecond, dispatch.ClaimFromHead, three, nil)
	m.Claimed(time.Millisecond, dispatch.ClaimFromCursor, three[:1], nil)
	m.Claimed(time.Millisecond, dispatch.ClaimFromCursor, nil, nil)
	m.Claimed(time.Millisecond, dispatch.ClaimLookback, three[:2], nil)
	m.Claimed(time.Millisecond, dispatch.ClaimRescan, nil, errors.New("failed claims count too"))
	m.ClaimedBehind(dispatch.ClaimLookback, 2)
	m.ClaimedBehind(dispatch.ClaimRescan, 0)
	require.Equal(t, 1.0, testutil.ToFloat64(m.Claims.WithLabelValues("head")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.Claims.WithLabelValues("cursor")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Claims.WithLabelValues("rescan")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Claims.WithLabelValues("lookback")))
	require.Equal(t, 3.0, testutil.ToFloat64(m.ClaimedJobs.WithLabelValues("head")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.ClaimedJobs.WithLabelValues("cursor")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.ClaimedJobs.WithLabelValues("lookback")))
	require.Equal(t, 0.0, testutil.ToFloat64(m.ClaimedJobs.WithLabelValues("rescan")), "a failed claim took nothing")
	require.Equal(t, 2.0, testutil.ToFloat64(m.BehindCursor.WithLabelValues("lookback")))
	require.Equal(t, 0.0, testutil.ToFloat64(m.BehindCursor.WithLabelValues("rescan")))
}
