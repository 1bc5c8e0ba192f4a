-- The key's pending job (ADR-0049): at most one job per topic and
-- replace_key is PENDING and has never started. The submit with a
-- replace_key is INSERT ... ON CONFLICT on this index, so two racing
-- submits of one key cannot both insert: one inserts, the other replaces
-- (or, keep_first, resolves to) that job. A claim takes the job out of the
-- index (RUNNING), and the key's next submit inserts anew. Rows without a
-- replace_key never enter it.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS jobs_replace_pending_idx;
CREATE UNIQUE INDEX CONCURRENTLY jobs_replace_pending_idx ON jobs (topic, replace_key)
    WHERE replace_key IS NOT NULL AND status = 'PENDING' AND attempts = 0 AND started_at IS NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobs_replace_pending_idx;
