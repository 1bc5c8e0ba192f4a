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

// TestSettlePlansStayBoundedFromEmptyStatistics: the generic plan a
// connection makes for the report and the heartbeat while the statistics
// say jobs is empty (a drained queue analyzed or vacuumed, a TRUNCATE)
// reads only the batch's jobs once the table has grown, not the whole
// primary key. While the statements matched ids by j.id = r.id, that plan
// was a nested loop (or a hash join) over a full scan of jobs_pkey, and it
// stayed until the next ANALYZE: the soak's first half minute spent
// 300-1,100 ms per settle on it, and a 100-result report over 200,000
// rows took 10 s.
func TestSettlePlansStayBoundedFromEmptyStatistics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(ctx, `ALTER TABLE jobs SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)

	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET enable_seqscan = off; SET enable_bitmapscan = off; SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	// PREPARE names its parameters $n: sent over the simple protocol, not
	// as a statement of pgx's with parameters of its own.
	_, err = conn.Conn().PgConn().Exec(ctx, `PREPARE report_stmt AS `+jobstore.ReportSQL+`;
		PREPARE beat_stmt AS `+jobstore.HeartbeatSQL).ReadAll()
	require.NoError(t, err)
	// EXECUTE under EXPLAIN takes no bound parameters: the batch is spelled
	// out (ten results for jobs that do not exist yet; only the plan
	// matters).
	const n = 10
	idList := make([]string, n)
	for i := range idList {
		idList[i] = uuid.Must(uuid.NewV7()).String()
	}
	ids := "'{" + strings.Join(idList, ",") + "}'::uuid[]"
	ones := "'{" + strings.TrimSuffix(strings.Repeat("1,", n), ",") + "}'"
	zeros := "'{" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "}'"
	reportExec := fmt.Sprintf(`EXECUTE report_stmt('{%s}'::text[], %s, %s::int[], %s::smallint[], '{%s}'::text[], %s::bigint[], '{%s}'::bytea[], 'gw-1')`,
		strings.TrimSuffix(strings.Repeat("w,", n), ","), ids, ones, ones, strings.TrimSuffix(strings.Repeat(`"",`, n), ","), zeros,
		strings.TrimSuffix(strings.Repeat("NULL,", n), ","))
	beatExec := fmt.Sprintf(`EXECUTE beat_stmt('w', %s, %s::int[], '30 seconds')`, ids, ones)
	// The generic plans are made now, on the empty statistics, and kept.
	for _, sql := range []string{reportExec, beatExec} {
		_, err = conn.Exec(ctx, `EXPLAIN `+sql)
		require.NoError(t, err)
	}

	jobs := make([]pulsetype.NewJob, 5000)
	for i := range jobs {
		jobs[i] = newJob("settle.empty", 5)
	}
	_, err = b.store.Insert(ctx, jobs)
	require.NoError(t, err)
	_, err = b.store.Claim(ctx, []string{"settle.empty"}, slots("w", 1000), time.Minute)
	require.NoError(t, err)

	for name, sql := range map[string]string{"report": reportExec, "heartbeat": beatExec} {
		var raw []byte
		require.NoError(t, conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+sql).Scan(&raw))
		var parsed []map[string]any
		require.NoError(t, json.Unmarshal(raw, &parsed))
		scans := jobsScans(parsed[0]["Plan"].(map[string]any))
		require.NotEmpty(t, scans, "%s reads jobs somewhere: %s", name, raw)
		for _, s := range scans {
			require.NotEmpty(t, s["Index Cond"], "%s reads jobs without an index condition (the whole index): %s", name, raw)
		}
	}
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
