-- The indexes the keyed claim walks (ADR-0054). Rows without a key never
-- enter them, so an unkeyed job pays one predicate per insert and claim.
--
--   - jobs_concurrency_due_idx: a keyed topic's due jobs by key, then in
--     dispatch order: the claim's loose scan jumps from key to key, and
--     each key's walk takes its next jobs.
--   - jobs_concurrency_running_idx: a key's RUNNING jobs, counted against
--     max_running_per_key.
--   - jobs_sequence_idx: a sequence's unfinished jobs in submit order: its
--     head is the first, and dead-lettered ones hold it under 'block'.
--
-- Keys are ordered bytewise (COLLATE "C"), the order the claim's rotation
-- takes them in.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS jobs_concurrency_due_idx;
CREATE INDEX CONCURRENTLY jobs_concurrency_due_idx
    ON jobs (topic, (concurrency_key COLLATE "C"), priority DESC, submitted_at, id)
    WHERE status IN ('PENDING', 'RETRYING') AND blocked_by = 0 AND concurrency_key IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS jobs_concurrency_running_idx;
CREATE INDEX CONCURRENTLY jobs_concurrency_running_idx
    ON jobs (topic, (concurrency_key COLLATE "C"))
    WHERE status = 'RUNNING' AND concurrency_key IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS jobs_sequence_idx;
CREATE INDEX CONCURRENTLY jobs_sequence_idx
    ON jobs (topic, (sequence_key COLLATE "C"), sequence_pos)
    WHERE sequence_key IS NOT NULL AND status IN ('PENDING', 'RETRYING', 'RUNNING', 'DEAD_LETTERED');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobs_sequence_idx;
DROP INDEX CONCURRENTLY IF EXISTS jobs_concurrency_running_idx;
DROP INDEX CONCURRENTLY IF EXISTS jobs_concurrency_due_idx;
