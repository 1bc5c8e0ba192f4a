-- The workflow view (ADR-0052, docs/workflows.md): a workflow's status is
-- derived from its jobs, never stored, so reading it must not walk a
-- large workflow's rows more than once, nor the table at all.
--
-- - jobs_workflow_status_idx (workflow_id, status, finished_at, id): a
--   workflow's counts by status are one walk of its entries; whether it
--   has a live, dead-lettered or canceled job is one probe each (the
--   workflow list's status); its first dead-lettered (or canceled) job,
--   the step it failed at, is the first entry of one range.
-- - jobs_workflow_roots_idx (id) WHERE workflow_id IS NOT DISTINCT FROM
--   id: one entry per workflow, its first job, so the workflow list pages
--   through workflows, not through their jobs. (Not `workflow_id = id`:
--   the planner turns an equality of two columns into an equivalence and
--   then never matches it to a partial index's predicate.)
--
-- Both hold only jobs submitted in a workflow: an ordinary job's insert
-- and transitions never write an entry.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS jobs_workflow_status_idx;
CREATE INDEX CONCURRENTLY jobs_workflow_status_idx ON jobs (workflow_id, status, finished_at, id)
    WHERE workflow_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS jobs_workflow_roots_idx;
CREATE INDEX CONCURRENTLY jobs_workflow_roots_idx ON jobs (id) WHERE workflow_id IS NOT DISTINCT FROM id;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobs_workflow_roots_idx;
DROP INDEX CONCURRENTLY IF EXISTS jobs_workflow_status_idx;
