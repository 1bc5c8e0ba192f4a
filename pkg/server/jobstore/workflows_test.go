package jobstore_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// rawFail claims id and dead-letters it with an error, as a report would.
func rawFail(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, msg string) {
	t.Helper()
	require.NoError(t, rawClaim(t, pool, id))
	tag, err := pool.Exec(ctx, `UPDATE jobs SET status = 'DEAD_LETTERED', lease_until = NULL, finished_at = clock_timestamp(),
		errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempts, 'error', $2::text, 'worker', 'w', 'at', now()))
		WHERE id = $1`, id, msg)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

func TestWorkflowStatusFollowsItsJobs(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	// The diamond: a -> b, a -> c, b -> d, c -> d.
	ids := rawGraph(t, pool, "wf.diamond", 4, []edge{{0, 1, "cancel"}, {0, 2, "cancel"}, {1, 3, "cancel"}, {2, 3, "cancel"}})
	a, b, c, d := ids[0], ids[1], ids[2], ids[3]

	w, err := store.GetWorkflow(ctx, a)
	require.NoError(t, err)
	require.Equal(t, jobstore.WorkflowRunning, w.Status)
	require.Equal(t, "wf.diamond", w.Topic)
	require.Equal(t, jobstore.WorkflowCounts{Pending: 4, Blocked: 3}, w.Counts)
	require.Nil(t, w.FailedStep)
	require.Nil(t, w.FinishedAt)

	rawFinish(t, pool, a, "COMPLETED")
	require.NoError(t, rawClaim(t, pool, c))
	rawFail(t, pool, b, "boom <b>")
	// d is canceled by b's failure; c still runs: running, failed at b.
	w, err = store.GetWorkflow(ctx, a)
	require.NoError(t, err)
	require.Equal(t, jobstore.WorkflowRunning, w.Status)
	require.Equal(t, jobstore.WorkflowCounts{Running: 1, Completed: 1, DeadLettered: 1, Canceled: 1}, w.Counts)
	require.NotNil(t, w.FailedStep)
	require.Equal(t, b, w.FailedStep.ID)
	require.Equal(t, "DEAD_LETTERED", string(w.FailedStep.Status))
	require.Equal(t, "boom <b>", w.FailedStep.Error)

	_, err = pool.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED', lease_until = NULL, finished_at = clock_timestamp() WHERE id = $1`, c)
	require.NoError(t, err)
	w, err = store.GetWorkflow(ctx, a)
	require.NoError(t, err)
	require.Equal(t, jobstore.WorkflowFailed, w.Status)
	require.Equal(t, b, w.FailedStep.ID)
	require.NotNil(t, w.FinishedAt)

	// Retry from the failed step: b and d come back; d waits for b again
	// (c completed), b is claimable at once.
	n, w, err := store.RetryWorkflow(ctx, a)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, jobstore.WorkflowRunning, w.Status)
	require.Nil(t, w.FailedStep)
	require.Equal(t, depState{"PENDING", 0}, depStateOf(t, pool, b))
	require.Equal(t, depState{"PENDING", 1}, depStateOf(t, pool, d))
	var attempts int
	var history int
	require.NoError(t, pool.QueryRow(ctx, `SELECT attempts, jsonb_array_length(errors) FROM jobs WHERE id = $1`, b).Scan(&attempts, &history))
	require.Equal(t, 0, attempts, "a fresh attempt budget")
	require.Equal(t, 1, history, "the history stays")

	_, _, err = store.RetryWorkflow(ctx, a)
	require.ErrorIs(t, err, apierr.ErrInvalidTransition, "nothing left to retry")

	rawFinish(t, pool, b, "COMPLETED")
	require.Equal(t, depState{"PENDING", 0}, depStateOf(t, pool, d))
	rawFinish(t, pool, d, "COMPLETED")
	w, err = store.GetWorkflow(ctx, a)
	require.NoError(t, err)
	require.Equal(t, jobstore.WorkflowDone, w.Status)
	require.Equal(t, jobstore.WorkflowCounts{Completed: 4}, w.Counts)
	require.Nil(t, w.FailedStep)

	_, _, err = store.CancelWorkflow(ctx, a)
	require.ErrorIs(t, err, apierr.ErrInvalidTransition, "a done workflow has nothing to cancel")

	// A job of the workflow that is not its first is no workflow's id.
	_, err = store.GetWorkflow(ctx, b)
	require.ErrorIs(t, err, apierr.ErrNotFound)
	_, err = store.GetWorkflow(ctx, uuid.Must(uuid.NewV7()))
	require.ErrorIs(t, err, apierr.ErrNotFound)
	_, _, err = store.CancelWorkflow(ctx, uuid.Must(uuid.NewV7()))
	require.ErrorIs(t, err, apierr.ErrNotFound)
}

func TestWorkflowCancelAndRetryAreOneStatementEach(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	// a chain a -> b -> c, and a -> d with policy run.
	ids := rawGraph(t, pool, "wf.cancel", 4, []edge{{0, 1, "cancel"}, {1, 2, "cancel"}, {0, 3, "run"}})
	rawFinish(t, pool, ids[0], "COMPLETED")
	require.NoError(t, rawClaim(t, pool, ids[1])) // b runs

	n, w, err := store.CancelWorkflow(ctx, ids[0])
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "b (running), c (blocked) and d (ready)")
	require.Equal(t, jobstore.WorkflowCanceled, w.Status)
	require.Equal(t, jobstore.WorkflowCounts{Completed: 1, Canceled: 3}, w.Counts)
	require.NotNil(t, w.FailedStep)
	require.Equal(t, "CANCELED", string(w.FailedStep.Status))
	var lease *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT lease_until::text FROM jobs WHERE id = $1`, ids[1]).Scan(&lease))
	require.Nil(t, lease, "the running attempt lost its lease")
	// The running attempt's late report no longer matches.
	tag, err := pool.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED' WHERE id = $1 AND status = 'RUNNING'`, ids[1])
	require.NoError(t, err)
	require.Zero(t, tag.RowsAffected())

	_, _, err = store.CancelWorkflow(ctx, ids[0])
	require.ErrorIs(t, err, apierr.ErrInvalidTransition)

	// Retry: every canceled job comes back, each waiting for what it
	// still waits for.
	n, w, err = store.RetryWorkflow(ctx, ids[0])
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.Equal(t, jobstore.WorkflowRunning, w.Status)
	require.Equal(t, depState{"PENDING", 0}, depStateOf(t, pool, ids[1]))
	require.Equal(t, depState{"PENDING", 1}, depStateOf(t, pool, ids[2]))
	require.Equal(t, depState{"PENDING", 0}, depStateOf(t, pool, ids[3]))
	claimed, err := store.Claim(ctx, []string{"wf.cancel"}, []string{"w", "w", "w", "w"}, 60e9)
	require.NoError(t, err)
	got := []uuid.UUID{}
	for _, c := range claimed {
		got = append(got, c.ID)
	}
	require.ElementsMatch(t, []uuid.UUID{ids[1], ids[3]}, got, "c waits for b")
}

func TestListWorkflowsPagesAndFilters(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	// Five workflows, oldest first: done, failed, running, canceled, done;
	// and an ordinary job, which is no workflow.
	var roots []uuid.UUID
	for i := range 5 {
		ids := rawGraph(t, pool, fmt.Sprintf("wf.list%d", i), 2, []edge{{0, 1, "cancel"}})
		switch i {
		case 0, 4:
			rawFinish(t, pool, ids[0], "COMPLETED")
			rawFinish(t, pool, ids[1], "COMPLETED")
		case 1:
			rawFail(t, pool, ids[0], "no")
		case 3:
			_, _, err := store.CancelWorkflow(ctx, ids[0])
			require.NoError(t, err)
		}
		roots = append(roots, ids[0])
	}
	rawGraph(t, pool, "wf.ordinary", 1, nil) // a graph of one job: a workflow of one

	status := func(p jobstore.WorkflowPage) []string {
		var out []string
		for _, w := range p.Workflows {
			out = append(out, w.Topic+":"+string(w.Status))
		}
		return out
	}
	p, err := store.ListWorkflows(ctx, jobstore.WorkflowFilter{Limit: 3})
	require.NoError(t, err)
	require.Equal(t, []string{"wf.ordinary:running", "wf.list4:done", "wf.list3:canceled"}, status(p))
	require.NotNil(t, p.Next)
	p, err = store.ListWorkflows(ctx, jobstore.WorkflowFilter{Limit: 3, Before: p.Next})
	require.NoError(t, err)
	require.Equal(t, []string{"wf.list2:running", "wf.list1:failed", "wf.list0:done"}, status(p))
	require.Nil(t, p.Next)

	p, err = store.ListWorkflows(ctx, jobstore.WorkflowFilter{Status: jobstore.WorkflowDone, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"wf.list4:done", "wf.list0:done"}, status(p))
	require.Nil(t, p.Next)
	require.Equal(t, roots[4], p.Workflows[0].ID)

	// A window of two: a page examines two workflows at most and says
	// where the next starts, even when it found none.
	var found []string
	var pages int
	var before *uuid.UUID
	for {
		p, err := store.ListWorkflows(ctx, jobstore.WorkflowFilter{Status: jobstore.WorkflowFailed, Limit: 1, Window: 2, Before: before})
		require.NoError(t, err)
		pages++
		found = append(found, status(p)...)
		if p.Next == nil {
			break
		}
		before = p.Next
		require.Less(t, pages, 10)
	}
	require.Equal(t, []string{"wf.list1:failed"}, found)
	// 6 workflows, 2 a window: the third window ends at the last
	// workflow, so a fourth page, empty, says there is nothing more.
	require.Equal(t, 4, pages)

	_, err = jobstore.ParseWorkflowStatus("status", "FAILED")
	require.ErrorContains(t, err, "status")
}

func TestWorkflowGraphIsBounded(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	ids := rawGraph(t, pool, "wf.graph", 5, []edge{{0, 1, "cancel"}, {0, 2, "run"}, {1, 3, "cancel"}, {2, 3, "cancel"}, {3, 4, "cancel"}})
	g, err := store.WorkflowGraph(ctx, ids[0], 100, 100)
	require.NoError(t, err)
	require.False(t, g.Truncated)
	require.Len(t, g.Jobs, 5)
	require.Equal(t, ids[0], g.Jobs[0].ID)
	require.False(t, g.Jobs[0].Blocked)
	require.True(t, g.Jobs[1].Blocked)
	require.Len(t, g.Edges, 5)
	policies := map[string]int{}
	for _, e := range g.Edges {
		policies[e.OnParentFailure]++
	}
	require.Equal(t, map[string]int{"cancel": 4, "run": 1}, policies)

	g, err = store.WorkflowGraph(ctx, ids[0], 3, 2)
	require.NoError(t, err)
	require.True(t, g.Truncated)
	require.Len(t, g.Jobs, 3)
	require.Len(t, g.Edges, 2)

	_, err = store.WorkflowGraph(ctx, uuid.Must(uuid.NewV7()), 3, 2)
	require.ErrorIs(t, err, apierr.ErrNotFound)
}

// A 10,000-job workflow among ordinary jobs: its status, its failed step
// and the list are served by indexes, never by a scan of jobs. The test's
// table is small beside a production one (a fifth of it is the workflow),
// where a scan that stops at the first match can look cheaper to the
// planner than a probe; the plans are therefore taken with sequential
// scans priced out, which leaves a Seq Scan only where no index serves
// the statement.
func TestWorkflowReadsAreIndexBacked(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	const fanOut = 10_000
	edges := make([]edge, fanOut-1)
	for i := range edges {
		edges[i] = edge{0, i + 1, "run"}
	}
	ids := rawGraph(t, pool, "wf.big", fanOut, edges)
	_, err := pool.Exec(ctx, `INSERT INTO jobs (id, topic) SELECT uuidv7_like, 'wf.other' FROM
		(SELECT gen_random_uuid() AS uuidv7_like FROM generate_series(1, 40000)) AS g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)

	w, err := store.GetWorkflow(ctx, ids[0])
	require.NoError(t, err)
	require.EqualValues(t, fanOut, w.Counts.Total())
	require.EqualValues(t, fanOut-1, w.Counts.Blocked)

	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"counts": {jobstore.WorkflowCountsSQL, []any{ids[0]}},
		"step":   {jobstore.WorkflowStepSQL, []any{ids[0], "DEAD_LETTERED"}},
		"list":   {jobstore.ListWorkflowsSQL, []any{nil, 1000, "failed", 51}},
	} {
		t.Run(name, func(t *testing.T) {
			var plan []byte
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
			require.NoError(t, err)
			require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q.sql, q.args...).Scan(&plan))
			var nodes []map[string]any
			require.NoError(t, json.Unmarshal(plan, &nodes))
			text := string(plan)
			require.NotContains(t, text, `"Node Type": "Seq Scan"`, "plan: %s", text)
			// (The step may be found through jobs_dead_lettered_topic_idx
			// when the statistics say the workflow has few dead letters.)
			require.Contains(t, text, `"Index Name": "jobs_`, "plan: %s", text)
			if name != "step" {
				require.Contains(t, text, `"Index Name": "jobs_workflow_`, "plan: %s", text)
			}
			if name == "list" {
				require.Contains(t, text, `"Index Name": "jobs_workflow_roots_idx"`, "plan: %s", text)
			}
		})
	}
}

// A workflow's cancel that Postgres aborts to break a deadlock (here with
// a transaction locking the workflow's last job, then its first) runs
// again and cancels the workflow.
func TestCancelWorkflowSurvivesADeadlock(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	ids := rawGraph(t, pool, "wf.deadlock", 3, []edge{{0, 1, "cancel"}, {1, 2, "cancel"}})

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The transaction waits long before looking for a deadlock, so the
	// cancel's backend finds it and the cancel is the side aborted.
	_, err = tx.Exec(ctx, `SET LOCAL deadlock_timeout = '10min'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, ids[2])
	require.NoError(t, err)

	type result struct {
		n   int64
		err error
	}
	canceled := make(chan result, 1)
	go func() {
		n, _, err := store.CancelWorkflow(ctx, ids[0])
		canceled <- result{n, err}
	}()
	// The cancel holds the first job and waits for the last.
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%WITH locked AS%')`).Scan(&waiting))
		return waiting
	}, time.Minute, 10*time.Millisecond)
	// Now the transaction wants the first job: a deadlock, which Postgres
	// breaks by aborting the cancel; the transaction gets its lock, and
	// the cancel runs again once it commits.
	_, err = tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, ids[0])
	require.NoError(t, err, "the cancel, not the transaction, was aborted")
	require.NoError(t, tx.Commit(ctx))
	r := <-canceled
	require.NoError(t, r.err)
	require.EqualValues(t, 3, r.n)
}
