package jobstore

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// pinnedPlanSQL pins the plan of the hot statements: those that read the
// head of a queue index (the claim, the reap, ExplainWait) and those that
// settle jobs by id (report, heartbeat). A queue table's statistics are stale
// by nature — the backlog goes from empty to a million rows between two
// ANALYZEs — and with "one matching row" in the statistics the planner
// prefers a bitmap scan plus a sort of every pending row (measured: 130 ms
// for a 200-row claim over a 66k backlog) to walking the index in order and
// stopping after LIMIT rows (6 ms). Turning off seq and bitmap scans for
// just that transaction leaves the ordered index scan as the only sane
// plan, whatever the statistics say.
//
// JIT is off for the same statements: with seq scans priced out and "one
// matching row" in the statistics, the planner prices the ordered walk as if
// it read the whole index, and at a million-row backlog that estimate
// (~113,000) crosses jit_above_cost. Compiling the claim then took ~17 ms,
// for a statement that runs in ~2 ms: measured as a 3-6x slower claim at a
// 1,000,000-job backlog than at 10,000, where the same plan stays below the
// threshold. An O(batch) statement never earns back a compile.
//
// The claim's lease, the reap, the report and the heartbeat join jobs to
// a batch of ids. pgx prepares them, and a generic plan made while the
// table was small would stay with the connection until the next ANALYZE.
// Seq scans off is not enough: on statistics that say jobs is empty (an
// ANALYZE or vacuum of a drained queue, a fresh fleet, a TRUNCATE) the
// planner still read the whole table, by a full scan of an index, as the
// outer side of a nested loop or the inner of a hash join — measured at
// 12 s for a 100-job claim and 10 s for a 100-result report once the
// table had grown to 200,000 rows; the soak's first half minute fell 30 s
// behind on it. A full index scan was on offer only because j.id = x.id
// is a clause a merge or hash join can use; the statements write it
// j.id = ANY (ARRAY[x.id]), the same test, which neither join can use, so
// the one plan left that does not scan all of jobs is a primary-key probe
// per batch row, the same at any size
// (TestJobLookupsStayBoundedFromEmptyStatistics).
//
// And with that plan the only sane one, planning it again for every
// execution buys nothing: the statements take their arrays and limits as
// parameters, so Postgres's default (plan_cache_mode auto) kept comparing
// custom plans against the generic one, and a profile of a backlog work-off
// spent ~3 % of Postgres's CPU in the planner. force_generic_plan plans
// each statement once per connection, under these same settings, since
// every execution of it runs behind this statement.
//
// The submit's INSERT runs behind it too. Its rows come from unnest over
// parameter arrays: a custom plan reads the row count from the arrays
// (one job, one row) and always looks cheaper than the generic plan's
// guess, so in auto mode Postgres planned the INSERT again at every
// execution — at an idle submit of one job, its bind took 0.5 ms of the
// Enqueue call's 3 (Postgres's log, log_min_duration_statement = 0; 0.1
// ms with the generic plan). The plan is the same for any batch: a
// function scan feeding the insert.
//
// It is also where the transaction passes the quiet window's gate
// (quiet_window.go), before any lock on jobs: the gate comes first in the
// target list, which Postgres evaluates in order.
const pinnedPlanSQL = `SELECT pg_advisory_xact_lock_shared(` + JobsGateKey + `), set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

// queryPinned runs sql with the pinned plan settings, in one round
// trip (a pipelined batch is one implicit transaction, so the settings are
// local to it), and hands each row to scan.
func (s *Store) queryPinned(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error {
	return s.queryPinnedAs(ctx, pinnedPlanSQL, sql, args, scan)
}

// queryPinnedAs is queryPinned with its own first statement (planSQL),
// which must set at least what pinnedPlanSQL sets, or be gateSQL for a
// statement that needs only the gate.
func (s *Store) queryPinnedAs(ctx context.Context, planSQL, sql string, args []any, scan func(pgx.Rows) error) error {
	br, err := s.sendPinned(ctx, planSQL, sql, args)
	if err != nil {
		return err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return err
	}
	for rows.Next() {
		if err := scan(rows); err != nil {
			rows.Close()
			br.Close()
			return err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		br.Close()
		return err
	}
	return br.Close()
}

// sendPinned sends planSQL and sql as one pipelined batch (one round trip,
// one implicit transaction) and reads planSQL's result; sql's is the
// caller's to read, and the batch the caller's to close.
func (s *Store) sendPinned(ctx context.Context, planSQL, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(planSQL)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	return br, nil
}
