package jobstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// The keyed claim of a topic with 10,000 keys, under EXPLAIN (ANALYZE,
// BUFFERS), logged: it visits at most KeyLanesPerClaim lanes, so its
// buffers stay bounded by that, not by the keys. The claim runs in a
// transaction rolled back after.
func TestKeyedClaimPlanAtTenThousandKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setKeyLimits(t, b, "many", 5, "")
	const keys = 10_000
	jobs := make([]pulsetype.NewJob, 0, keys)
	for i := range keys {
		j := newJob("many", 5)
		j.ConcurrencyKey = fmt.Sprintf("tenant-%05d", i)
		jobs = append(jobs, j)
	}
	for start := 0; start < len(jobs); start += 2000 {
		_, err := b.store.Insert(ctx, jobs[start:start+2000])
		require.NoError(t, err)
	}
	_, err := b.pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, jobstore.ClaimPlanSQL)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) "+jobstore.ClaimLimitedSQL,
		[]string{"many"}, 50, slots("w", 50), "1 minute")
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	text := strings.Join(plan, "\n")
	require.Contains(t, text, "jobs_concurrency_due_idx", "the lanes are found on the keyed index")
	var summary []string
	for _, l := range plan {
		if strings.Contains(l, "Execution Time") || strings.Contains(l, "Planning Time") || strings.HasPrefix(strings.TrimSpace(l), "Buffers") && len(summary) < 3 {
			summary = append(summary, strings.TrimSpace(l))
		}
	}
	t.Logf("keyed claim of 50 at %d keys: %s", keys, strings.Join(summary, "; "))
	if testing.Verbose() {
		t.Log(text)
	}
}
