package jobstore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// TestSettlePlansLookUpEachID: a report or heartbeat finds each job by its
// primary key in the generic plan a connection keeps,
// even when the statistics were taken while no job ran (a fresh fleet, and
// the benchmark after its latency run). Allowed the partial index of
// RUNNING rows, the planner walked every running job once per result.
func TestSettlePlansLookUpEachID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 300 {
		insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusCompleted, Attempts: 1})
	}
	_, err := b.pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)
	// After the statistics: a backlog, a thousand of it running.
	jobs := make([]pulsetype.NewJob, 5000)
	for i := range jobs {
		jobs[i] = newJob("settle", 5)
	}
	_, err = b.store.Insert(ctx, jobs)
	require.NoError(t, err)
	claimed, err := b.store.Claim(ctx, []string{"settle"}, slots("w", 1000), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1000)

	n := 100
	workers, ids, attempts, outcomes, errs, after := make([]string, n), make([]uuid.UUID, n), make([]int32, n), make([]int16, n), make([]string, n), make([]int64, n)
	for i := range n {
		workers[i], ids[i], attempts[i], outcomes[i] = "w", claimed[i].ID, 1, int16(pulsetype.OutcomeComplete)
	}
	// PinnedPlanSQL makes every execution use the generic plan a
	// connection keeps (plan_cache_mode force_generic_plan): that plan is
	// the one that must look each id up.
	report := explain(t, b, jobstore.PinnedPlanSQL, jobstore.ReportSQL, workers, ids, attempts, outcomes, errs, after, make([][]byte, n), "gw-1")
	beat := explain(t, b, jobstore.PinnedPlanSQL, jobstore.HeartbeatSQL, "w", ids, attempts, "30 seconds")
	for name, p := range map[string]plan{"report": report, "heartbeat": beat} {
		require.NotContains(t, p.nodes(), "Index Scan jobs_expired_lease_idx", "%s walks every running job: %s", name, p.text)
		require.Contains(t, p.nodes(), "Index Scan jobs_pkey", "%s: %s", name, p.text)
	}
}

// TestJobLookupsStayBoundedFromEmptyStatistics: the generic plan a
// connection makes, while the statistics say jobs is empty (a drained
// queue analyzed or vacuumed, a fresh fleet, a TRUNCATE), for each
// statement that joins jobs to a batch of ids — the claim's lease, the
// reap's, a report's, a heartbeat's — reads only the batch's jobs once
// the table has grown, not the whole table. While they matched ids by
// j.id = x.id, each of those plans was a nested loop (or a hash join)
// over a full scan of a jobs index, kept until the next ANALYZE: 12 s for
// a 100-job claim and 10 s for a 100-result report over 200,000 rows; the
// soak's first half minute fell 30 s behind on it.
//
// The statements are prepared and first run on the empty statistics
// (EXPLAIN EXECUTE makes the generic plan, force_generic_plan keeps it),
// the table grows to 5,000 jobs with autovacuum off (the statistics stay
// empty), and each runs again under EXPLAIN ANALYZE, rolled back: every
// node that scans jobs may produce or filter out a few rows per batch
// member, never the table.
func TestJobLookupsStayBoundedFromEmptyStatistics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(ctx, `ALTER TABLE jobs SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)

	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET enable_seqscan = off; SET enable_bitmapscan = off; SET jit = off; SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	statements := map[string]string{
		"report": jobstore.ReportSQL, "heartbeat": jobstore.HeartbeatSQL,
		"claim": jobstore.ClaimSQL, "claim_after": jobstore.ClaimAfterSQL, "reap": jobstore.ReapSQL,
	}
	for name, sql := range statements {
		// PREPARE names its parameters $n: sent over the simple protocol,
		// not as a statement of pgx's with parameters of its own.
		_, err = conn.Conn().PgConn().Exec(ctx, `PREPARE `+name+` AS `+sql).ReadAll()
		require.NoError(t, err, name)
	}

	// The batch: n results or beats (for jobs that exist once the table has
	// grown), n slots of a claim, a reap of n.
	const n = 10
	execute := func(ids []uuid.UUID) map[string]string {
		list := make([]string, len(ids))
		for i, id := range ids {
			list[i] = id.String()
		}
		idArr := "'{" + strings.Join(list, ",") + "}'::uuid[]"
		fill := func(v, typ string) string { return fmt.Sprintf("array_fill(%s::%s, ARRAY[%d])", v, typ, n) }
		return map[string]string{
			"report": fmt.Sprintf(`EXECUTE report(%s, %s, %s, %s, %s, %s, %s, 'gw-1')`,
				fill("'w'", "text"), idArr, fill("1", "int"), fill("1", "smallint"), fill("''", "text"), fill("0", "bigint"), fill("NULL", "bytea")),
			"heartbeat":   fmt.Sprintf(`EXECUTE heartbeat('w', %s, %s, '30 seconds')`, idArr, fill("1", "int")),
			"claim":       fmt.Sprintf(`EXECUTE claim('{settle.empty}', %d, %s, '30 seconds')`, n, fill("'w'", "text")),
			"claim_after": fmt.Sprintf(`EXECUTE claim_after('{settle.empty}', %d, %s, '30 seconds', 0, '-infinity', '%s')`, n, fill("'w'", "text"), uuid.Nil),
			"reap":        fmt.Sprintf(`EXECUTE reap(%d, 'gw-1')`, n),
		}
	}
	// The generic plans are made now, on the empty statistics, and kept.
	unknown := make([]uuid.UUID, n)
	for i := range unknown {
		unknown[i] = uuid.Must(uuid.NewV7())
	}
	for name, sql := range execute(unknown) {
		_, err = conn.Exec(ctx, `EXPLAIN `+sql)
		require.NoError(t, err, name)
	}

	jobs := make([]pulsetype.NewJob, 5000)
	for i := range jobs {
		jobs[i] = newJob("settle.empty", 5)
	}
	_, err = b.store.Insert(ctx, jobs)
	require.NoError(t, err)
	claimed, err := b.store.Claim(ctx, []string{"settle.empty"}, slots("w", 1000), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1000)
	// Half the running jobs' leases have lapsed, for the reap to find.
	_, err = b.pool.Exec(ctx, `UPDATE jobs SET lease_until = now() - interval '1 minute'
		WHERE id IN (SELECT id FROM jobs WHERE status = 'RUNNING' LIMIT 500)`)
	require.NoError(t, err)
	held := make([]uuid.UUID, n)
	for i := range held {
		held[i] = claimed[len(claimed)-1-i].ID
	}

	// Every statement is judged before the test fails, so a regression
	// names each statement it reaches.
	var whole []string
	for name, sql := range execute(held) {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		var raw []byte
		require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+sql).Scan(&raw), name)
		require.NoError(t, tx.Rollback(ctx))
		var parsed []map[string]any
		require.NoError(t, json.Unmarshal(raw, &parsed))
		scans := jobsScans(parsed[0]["Plan"].(map[string]any))
		require.NotEmpty(t, scans, "%s reads jobs somewhere: %s", name, raw)
		for _, s := range scans {
			loops, _ := s["Actual Loops"].(float64)
			rows, _ := s["Actual Rows"].(float64)
			removed, _ := s["Rows Removed by Filter"].(float64)
			if read := (rows + removed) * loops; read > float64(5*n) {
				whole = append(whole, fmt.Sprintf("%s reads %v rows of jobs with %s (%v loops) for a batch of %d: %s", name, read, s["Index Name"], loops, n, raw))
			}
		}
	}
	require.Empty(t, whole)
}

// jobsScans lists the plan nodes under node that scan the jobs table.
func jobsScans(node map[string]any) []map[string]any {
	var out []map[string]any
	if t, _ := node["Node Type"].(string); node["Relation Name"] == "jobs" && strings.HasSuffix(t, "Scan") {
		out = append(out, node)
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		out = append(out, jobsScans(c.(map[string]any))...)
	}
	return out
}
