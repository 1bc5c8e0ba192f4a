package jobstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// TestClaimStatementsRunUnderTheClaimTimeout: the claim's first statement
// sets statement_timeout for the rest of its transaction, to
// ClaimStatementTimeout, and only for that transaction.
func TestClaimStatementsRunUnderTheClaimTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, jobstore.ClaimPlanSQL)
	require.NoError(t, err)
	var ms int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'`).Scan(&ms))
	require.Equal(t, jobstore.ClaimStatementTimeout, time.Duration(ms)*time.Millisecond)
	// A statement that outlives it is canceled.
	_, err = tx.Exec(ctx, `SELECT pg_sleep($1)`, (jobstore.ClaimStatementTimeout + 500*time.Millisecond).Seconds())
	require.ErrorContains(t, err, "statement timeout")
	require.NoError(t, tx.Rollback(ctx))

	var after string
	require.NoError(t, b.pool.QueryRow(ctx, `SHOW statement_timeout`).Scan(&after))
	require.Equal(t, "0", after, "the timeout ends with the claim's transaction")
}
