-- +goose NO TRANSACTION
-- +goose Up
-- A test migration (pkg/server/migrate's live test): an index on jobs,
-- built CONCURRENTLY outside a transaction, as migrations/README.md asks.
-- A failed or interrupted build leaves an INVALID index behind, so the
-- migration drops it first: a retry starts clean.
DROP INDEX CONCURRENTLY IF EXISTS jobs_topic_id_idx;
CREATE INDEX CONCURRENTLY jobs_topic_id_idx ON jobs (topic, id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobs_topic_id_idx;
