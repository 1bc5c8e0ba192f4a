package jobstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// edge is one dependency written by rawGraph: jobs[parent] -> jobs[child].
type edge struct {
	parent, child int
	policy        string // "cancel" or "run"
}

// rawGraph inserts n PENDING jobs of topic and the edges between them in
// one transaction, through raw SQL only: the schema alone blocks and
// releases them. It returns the jobs' ids in order.
func rawGraph(t *testing.T, pool *pgxpool.Pool, topic string, n int, edges []edge, parents ...uuid.UUID) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO jobs (id, topic, workflow_id) SELECT id, $2, $1[1] FROM unnest($1::uuid[]) AS id`, ids, topic)
	require.NoError(t, err)
	var ps, cs []uuid.UUID
	var pol []string
	for _, e := range edges {
		ps, cs, pol = append(ps, ids[e.parent]), append(cs, ids[e.child]), append(pol, e.policy)
	}
	// Extra parents (existing jobs) of the graph's first job.
	for _, p := range parents {
		ps, cs, pol = append(ps, p), append(cs, ids[0]), append(pol, "cancel")
	}
	if len(ps) > 0 {
		_, err = tx.Exec(ctx, `INSERT INTO job_dependencies (parent_id, child_id, on_parent_failure)
			SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[])`, ps, cs, pol)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
	return ids
}

func rawClaim(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) error {
	t.Helper()
	_, err := pool.Exec(ctx, `UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'w',
		lease_until = now() + interval '1 minute', started_at = GREATEST(now(), submitted_at) WHERE id = $1`, id)
	return err
}

// rawFinish claims id and ends it in status (COMPLETED or DEAD_LETTERED).
func rawFinish(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, status string) {
	t.Helper()
	require.NoError(t, rawClaim(t, pool, id))
	tag, err := pool.Exec(ctx, `UPDATE jobs SET status = $2, lease_until = NULL, finished_at = clock_timestamp() WHERE id = $1`, id, status)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

type depState struct {
	Status    string
	BlockedBy int
}

func depStateOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) depState {
	t.Helper()
	var s depState
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, blocked_by FROM jobs WHERE id = $1`, id).Scan(&s.Status, &s.BlockedBy))
	return s
}

// The schema's rules on dependencies, through raw SQL: a blocked job
// cannot run, a parent's settle releases or cancels its children by the
// edge's policy, edges are written only with their child and never change.
func TestSchemaDependencies(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)

	t.Run("ABlockedJobCannotRunAndIsNotClaimed", func(t *testing.T) {
		ids := rawGraph(t, pool, "deps.blocked", 2, []edge{{0, 1, "cancel"}})
		require.Equal(t, depState{"PENDING", 1}, depStateOf(t, pool, ids[1]))
		requireConstraint(t, rawClaim(t, pool, ids[1]), "jobs_blocked_not_runnable")

		claimed, err := store.Claim(ctx, []string{"deps.blocked"}, []string{"w", "w"}, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, ids[0], claimed[0].ID, "only the parent is claimable")
	})

	t.Run("ACompletedParentReleasesItsChild", func(t *testing.T) {
		ids := rawGraph(t, pool, "deps.release", 2, []edge{{0, 1, "cancel"}})
		rawFinish(t, pool, ids[0], "COMPLETED")
		require.Equal(t, depState{"PENDING", 0}, depStateOf(t, pool, ids[1]))
		var notBefore bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT c.next_run_at >= p.finished_at FROM jobs c, jobs p WHERE c.id = $1 AND p.id = $2`,
			ids[1], ids[0]).Scan(&notBefore))
		require.True(t, notBefore, "a released child is due no earlier than its parent finished")
		claimed, err := store.Claim(ctx, []string{"deps.release"}, []string{"w"}, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, ids[1], claimed[0].ID)
	})

	t.Run("AFailedParentCancelsDownTheGraph", func(t *testing.T) {
		// 0 -> 1 -> 2, and 0 -> 3 with policy run.
		ids := rawGraph(t, pool, "deps.cascade", 4, []edge{{0, 1, "cancel"}, {1, 2, "cancel"}, {0, 3, "run"}})
		rawFinish(t, pool, ids[0], "DEAD_LETTERED")
		require.Equal(t, "CANCELED", depStateOf(t, pool, ids[1]).Status)
		require.Equal(t, "CANCELED", depStateOf(t, pool, ids[2]).Status)
		require.Equal(t, depState{"PENDING", 0}, depStateOf(t, pool, ids[3]), "policy run: released whatever the outcome")
	})

	t.Run("ACanceledParentCancelsItsChild", func(t *testing.T) {
		ids := rawGraph(t, pool, "deps.cancel", 2, []edge{{0, 1, "cancel"}})
		_, err := pool.Exec(ctx, `UPDATE jobs SET status = 'CANCELED', finished_at = now() WHERE id = $1`, ids[0])
		require.NoError(t, err)
		require.Equal(t, "CANCELED", depStateOf(t, pool, ids[1]).Status)
	})

	t.Run("ParentsFinishedBeforeTheChildIsSubmitted", func(t *testing.T) {
		done := rawGraph(t, pool, "deps.late", 1, nil)
		rawFinish(t, pool, done[0], "COMPLETED")
		ids := rawGraph(t, pool, "deps.late", 1, nil, done[0])
		require.Equal(t, depState{"PENDING", 0}, depStateOf(t, pool, ids[0]), "a completed parent does not block")

		dead := rawGraph(t, pool, "deps.late", 1, nil)
		rawFinish(t, pool, dead[0], "DEAD_LETTERED")
		ids = rawGraph(t, pool, "deps.late", 1, nil, dead[0])
		require.Equal(t, "CANCELED", depStateOf(t, pool, ids[0]).Status, "a dead parent cancels a child of policy cancel at once")
	})

	t.Run("ARetriedParentBlocksItsWaitingChildAgain", func(t *testing.T) {
		ids := rawGraph(t, pool, "deps.retry", 3, []edge{{0, 2, "run"}, {1, 2, "run"}})
		rawFinish(t, pool, ids[0], "DEAD_LETTERED")
		require.Equal(t, depState{"PENDING", 1}, depStateOf(t, pool, ids[2]))
		_, err := pool.Exec(ctx, `UPDATE jobs SET status = 'PENDING', attempts = 0, finished_at = NULL WHERE id = $1`, ids[0])
		require.NoError(t, err)
		require.Equal(t, depState{"PENDING", 2}, depStateOf(t, pool, ids[2]))
		rawFinish(t, pool, ids[0], "COMPLETED")
		rawFinish(t, pool, ids[1], "COMPLETED")
		require.Equal(t, depState{"PENDING", 0}, depStateOf(t, pool, ids[2]))
	})

	t.Run("ARetriedChildWaitsForItsUnfinishedParents", func(t *testing.T) {
		ids := rawGraph(t, pool, "deps.childretry", 2, []edge{{0, 1, "cancel"}})
		_, err := pool.Exec(ctx, `UPDATE jobs SET status = 'CANCELED', finished_at = now() WHERE id = $1`, ids[1])
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE jobs SET status = 'PENDING', attempts = 0, finished_at = NULL WHERE id = $1`, ids[1])
		require.NoError(t, err)
		require.Equal(t, depState{"PENDING", 1}, depStateOf(t, pool, ids[1]))
	})

	t.Run("EdgesAreWrittenWithTheirChildOnly", func(t *testing.T) {
		ids := rawGraph(t, pool, "deps.edges", 3, []edge{{0, 1, "cancel"}})
		_, err := pool.Exec(ctx, `INSERT INTO job_dependencies (parent_id, child_id) VALUES ($1, $2)`, ids[0], ids[2])
		requireConstraint(t, err, "job_dependencies_immutable")
		_, err = pool.Exec(ctx, `UPDATE job_dependencies SET on_parent_failure = 'run' WHERE child_id = $1`, ids[1])
		requireConstraint(t, err, "job_dependencies_immutable")
		_, err = pool.Exec(ctx, `DELETE FROM job_dependencies WHERE child_id = $1`, ids[1])
		requireConstraint(t, err, "job_dependencies_immutable")
		_, err = pool.Exec(ctx, `UPDATE jobs SET blocked_by = 0 WHERE id = $1`, ids[1])
		requireConstraint(t, err, "jobs_blocked_by_release_only")
		_, err = pool.Exec(ctx, `UPDATE jobs SET workflow_id = gen_random_uuid() WHERE id = $1`, ids[1])
		requireConstraint(t, err, "jobs_identity_immutable")
		require.Equal(t, depState{"PENDING", 1}, depStateOf(t, pool, ids[1]))
	})

	t.Run("EdgeRules", func(t *testing.T) {
		for name, tc := range map[string]struct{ sql, rule string }{
			"Self":          {`INSERT INTO job_dependencies (parent_id, child_id) SELECT $1::uuid, $1::uuid WHERE $2::uuid IS NOT NULL`, "job_dependencies_not_self"},
			"UnknownPolicy": {`INSERT INTO job_dependencies (parent_id, child_id, on_parent_failure) VALUES ($2, $1, 'ignore')`, "job_dependencies_policy_known"},
		} {
			t.Run(name, func(t *testing.T) {
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(ctx) }()
				a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
				_, err = tx.Exec(ctx, `INSERT INTO jobs (id, topic) VALUES ($1, 't'), ($2, 't')`, a, b)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, tc.sql, a, b)
				requireConstraint(t, err, tc.rule)
			})
		}
	})

	t.Run("AFanInCountsDown", func(t *testing.T) {
		const parents = 50
		edges := make([]edge, parents)
		for i := range edges {
			edges[i] = edge{i, parents, "cancel"}
		}
		ids := rawGraph(t, pool, "deps.fanin", parents+1, edges)
		require.Equal(t, depState{"PENDING", parents}, depStateOf(t, pool, ids[parents]))
		for i := range parents {
			rawFinish(t, pool, ids[i], "COMPLETED")
			require.Equal(t, depState{"PENDING", parents - i - 1}, depStateOf(t, pool, ids[parents]), fmt.Sprintf("after parent %d", i))
		}
	})
}
