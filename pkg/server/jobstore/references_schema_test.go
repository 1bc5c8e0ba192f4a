package jobstore_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// requireMissingJob checks that err is the foreign-key refusal
// (foreign_key_violation, 23503) a row naming a job that does not exist
// gets, from the named rule.
func requireMissingJob(t *testing.T, err error, constraint string) {
	t.Helper()
	requireRefusal(t, err, "23503", constraint)
}

// rowsNaming counts the rows of job_dependencies and job_replacements that
// name any of ids.
func rowsNaming(t *testing.T, pool *pgxpool.Pool, ids ...uuid.UUID) (edges, replacements int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM job_dependencies WHERE parent_id = ANY ($1) OR child_id = ANY ($1)),
		(SELECT count(*) FROM job_replacements WHERE job_id = ANY ($1))`, ids).Scan(&edges, &replacements))
	return edges, replacements
}

// keysNaming counts the rows of job_uniques that name any of ids.
func keysNaming(t *testing.T, pool *pgxpool.Pool, ids ...uuid.UUID) (keys int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_uniques WHERE job_id = ANY ($1)`, ids).Scan(&keys))
	return keys
}

// uniqueKeyOf writes a unique key held by job $1 for an hour (raw, to test
// the rule alone; a unique submit writes it in its insert's statement).
const uniqueKeyOf = `INSERT INTO job_uniques (unique_key, job_id, expires_at)
	VALUES (gen_random_uuid(), $1, now() + interval '1 hour')`

// requireDeleteWaitsForCommit checks that a DELETE of job waits for tx,
// which wrote a row naming it (lock_not_available after 100 ms), and then,
// tx committed, deletes it.
func requireDeleteWaitsForCommit(t *testing.T, pool *pgxpool.Pool, tx pgx.Tx, job uuid.UUID) {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET lock_timeout = '100ms'`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `DELETE FROM jobs WHERE id = $1`, job)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "the DELETE must wait for the writing transaction, got %v", err)
	require.Equal(t, "55P03", pgErr.Code, "lock_not_available: %s", pgErr.Message)
	_, err = conn.Exec(ctx, `RESET lock_timeout`)
	require.NoError(t, err)

	require.NoError(t, tx.Commit(ctx))
	_, err = conn.Exec(ctx, `DELETE FROM jobs WHERE id = $1`, job)
	require.NoError(t, err)
}

// replacementOf writes a row of job id's replacement history, as the
// schema's jobs_record_replacement does (raw, to test the rule alone).
const replacementOf = `INSERT INTO job_replacements (job_id, n, args_before, run_at_before, run_at_after)
	VALUES ($1, 1, '{}', now(), now())`

// The rows of job_dependencies, job_replacements and job_uniques name jobs
// that exist, and go with their jobs, whatever deletes them (ADR-0058 and
// ADR-0068: triggers in place of the foreign keys, one statement per
// DELETE instead of one cascade per deleted row).
func TestSchemaJobReferences(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	t.Run("AnEdgeToAJobThatDoesNotExistIsRefused", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		child := uuid.Must(uuid.NewV7())
		_, err = tx.Exec(ctx, `INSERT INTO jobs (id, topic) VALUES ($1, 'refs.edge')`, child)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO job_dependencies (parent_id, child_id) VALUES ($1, $2)`, uuid.Must(uuid.NewV7()), child)
		requireMissingJob(t, err, "job_dependencies_parent_id_fkey")
	})

	t.Run("AnEdgeFromAJobThatDoesNotExistIsRefused", func(t *testing.T) {
		parent := rawGraph(t, pool, "refs.edge", 1, nil)[0]
		_, err := pool.Exec(ctx, `INSERT INTO job_dependencies (parent_id, child_id) VALUES ($1, $2)`, parent, uuid.Must(uuid.NewV7()))
		requireMissingJob(t, err, "job_dependencies_child_id_fkey")
	})

	t.Run("AReplacementOfAJobThatDoesNotExistIsRefused", func(t *testing.T) {
		_, err := pool.Exec(ctx, replacementOf, uuid.Must(uuid.NewV7()))
		requireMissingJob(t, err, "job_replacements_job_id_fkey")
	})

	t.Run("AUniqueKeyOfAJobThatDoesNotExistIsRefused", func(t *testing.T) {
		_, err := pool.Exec(ctx, uniqueKeyOf, uuid.Must(uuid.NewV7()))
		requireMissingJob(t, err, "job_uniques_job_id_fkey")
		job := rawGraph(t, pool, "refs.key", 1, nil)[0]
		var key uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, uniqueKeyOf+` RETURNING unique_key`, job).Scan(&key))
		_, err = pool.Exec(ctx, `UPDATE job_uniques SET job_id = $1 WHERE unique_key = $2`, uuid.Must(uuid.NewV7()), key)
		requireMissingJob(t, err, "job_uniques_job_id_fkey")
	})

	t.Run("DeletingJobsDeletesTheirRowsInOneStatement", func(t *testing.T) {
		// 0 -> 1, 0 -> 2, 1 -> 2; each finished, job 1 with a replacement
		// row, job 2 with a unique key, and a bystander graph whose rows
		// must stay.
		ids := rawGraph(t, pool, "refs.delete", 3, []edge{{0, 1, "cancel"}, {0, 2, "cancel"}, {1, 2, "cancel"}})
		other := rawGraph(t, pool, "refs.delete", 2, []edge{{0, 1, "cancel"}})
		_, err := pool.Exec(ctx, replacementOf, ids[1])
		require.NoError(t, err)
		for _, id := range []uuid.UUID{ids[2], other[1]} {
			_, err = pool.Exec(ctx, uniqueKeyOf, id)
			require.NoError(t, err)
		}
		for _, id := range ids {
			rawFinish(t, pool, id, "COMPLETED")
		}
		edges, replacements := rowsNaming(t, pool, ids...)
		require.Equal(t, 3, edges)
		require.Equal(t, 1, replacements)

		tag, err := pool.Exec(ctx, `DELETE FROM jobs WHERE id = ANY ($1)`, ids)
		require.NoError(t, err)
		require.EqualValues(t, 3, tag.RowsAffected())
		edges, replacements = rowsNaming(t, pool, ids...)
		require.Zero(t, edges, "the deleted jobs' edges are gone")
		require.Zero(t, replacements, "the deleted job's replacement history is gone")
		require.Zero(t, keysNaming(t, pool, ids...), "the deleted job's unique key is gone")
		edges, _ = rowsNaming(t, pool, other...)
		require.Equal(t, 1, edges, "another graph's edge stays")
		require.Equal(t, 1, keysNaming(t, pool, other...), "another job's unique key stays")
	})

	t.Run("DeletingAParentKeepsItsChildAndTheChildsOtherEdges", func(t *testing.T) {
		ids := rawGraph(t, pool, "refs.parent", 3, []edge{{0, 2, "cancel"}, {1, 2, "cancel"}})
		rawFinish(t, pool, ids[0], "COMPLETED")
		_, err := pool.Exec(ctx, `DELETE FROM jobs WHERE id = $1`, ids[0])
		require.NoError(t, err)
		edges, _ := rowsNaming(t, pool, ids[0])
		require.Zero(t, edges)
		edges, _ = rowsNaming(t, pool, ids[2])
		require.Equal(t, 1, edges, "the edge from the unfinished parent stays")
		require.Equal(t, depState{"PENDING", 1}, depStateOf(t, pool, ids[2]), "the child still waits for its other parent")
	})

	t.Run("AJobCannotBeDeletedUnderANewEdgeUntilTheEdgeCommits", func(t *testing.T) {
		// A finished parent gets a new child in an open transaction: the
		// edge's check holds the parent's row, so a retention DELETE of the
		// parent waits for the edge's commit and then takes the edge with
		// it, leaving no edge that names a job that is gone.
		parent := rawGraph(t, pool, "refs.race", 1, nil)[0]
		rawFinish(t, pool, parent, "COMPLETED")

		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		child := uuid.Must(uuid.NewV7())
		_, err = tx.Exec(ctx, `INSERT INTO jobs (id, topic) VALUES ($1, 'refs.race')`, child)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO job_dependencies (parent_id, child_id) VALUES ($1, $2)`, parent, child)
		require.NoError(t, err)

		requireDeleteWaitsForCommit(t, pool, tx, parent)
		edges, _ := rowsNaming(t, pool, parent, child)
		require.Zero(t, edges)
	})

	t.Run("AJobCannotBeDeletedUnderANewUniqueKeyUntilTheKeyCommits", func(t *testing.T) {
		// The same for a unique key written by hand naming a finished job:
		// the key's check holds the job's row, so the DELETE waits and
		// then takes the key with it.
		job := rawGraph(t, pool, "refs.keyrace", 1, nil)[0]
		rawFinish(t, pool, job, "COMPLETED")

		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, uniqueKeyOf, job)
		require.NoError(t, err)

		requireDeleteWaitsForCommit(t, pool, tx, job)
		require.Zero(t, keysNaming(t, pool, job))
	})

	t.Run("TruncatingJobsEmptiesTheirRows", func(t *testing.T) {
		// TRUNCATE jobs alone: no foreign key names jobs any more, so
		// nothing else needs naming, and the trigger empties the rest.
		pool := pgtest.Pool(t)
		ids := rawGraph(t, pool, "refs.truncate", 2, []edge{{0, 1, "cancel"}})
		_, err := pool.Exec(ctx, replacementOf, ids[0])
		require.NoError(t, err)
		_, err = pool.Exec(ctx, uniqueKeyOf, ids[1])
		require.NoError(t, err)
		for _, id := range ids {
			rawFinish(t, pool, id, "COMPLETED")
		}
		_, err = pool.Exec(ctx, `TRUNCATE jobs`)
		require.NoError(t, err)
		edges, replacements := rowsNaming(t, pool, ids...)
		require.Zero(t, edges)
		require.Zero(t, replacements)
		require.Zero(t, keysNaming(t, pool, ids...))
	})
}
