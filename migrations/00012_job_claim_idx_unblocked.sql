-- +goose NO TRANSACTION
-- The claim index without blocked jobs (00010, ADR-0047): jobs_claim_idx
-- is rebuilt with `AND blocked_by = 0` in its predicate, so a job waiting
-- for its parents is not in the index the claim walks (a 10,000-child
-- fan-out costs the claim nothing while it waits) and the plan for
-- ordinary jobs stays the same ordered walk. The claim statements and
-- every read that walks the index name the predicate.
--
-- The new index is built beside the old one (jobs_claim_idx_next), the old
-- one dropped, the new one renamed: every statement CONCURRENTLY or under
-- a lock that lets the workload go on. A failed build leaves an INVALID
-- jobs_claim_idx_next, dropped first so a retry starts clean. Claims of a
-- gateway older than this migration do not name blocked_by and cannot use
-- the new index: upgrade the gateways right after migrating.
--
-- jobs_workflow_idx: a workflow's jobs, for the workflow view.

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS jobs_claim_idx_next;
CREATE INDEX CONCURRENTLY jobs_claim_idx_next ON jobs (priority DESC, submitted_at, id)
    WHERE status IN ('PENDING', 'RETRYING') AND blocked_by = 0;
DROP INDEX CONCURRENTLY IF EXISTS jobs_claim_idx;
ALTER INDEX jobs_claim_idx_next RENAME TO jobs_claim_idx;
DROP INDEX CONCURRENTLY IF EXISTS jobs_workflow_idx;
CREATE INDEX CONCURRENTLY jobs_workflow_idx ON jobs (workflow_id) WHERE workflow_id IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobs_workflow_idx;
DROP INDEX CONCURRENTLY IF EXISTS jobs_claim_idx_next;
CREATE INDEX CONCURRENTLY jobs_claim_idx_next ON jobs (priority DESC, submitted_at, id)
    WHERE status IN ('PENDING', 'RETRYING');
DROP INDEX CONCURRENTLY IF EXISTS jobs_claim_idx;
ALTER INDEX jobs_claim_idx_next RENAME TO jobs_claim_idx;
