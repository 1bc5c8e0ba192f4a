-- +goose NO TRANSACTION
-- The index behind the tag filter of job listings (00008, ADR-0046): GIN
-- over tags, only for jobs that have any, so an untagged job's insert,
-- claim and report never touch it. Built CONCURRENTLY, as
-- migrations/README.md asks; a failed build leaves an INVALID index,
-- dropped first so a retry starts clean.

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS jobs_tags_idx;
CREATE INDEX CONCURRENTLY jobs_tags_idx ON jobs USING gin (tags) WHERE tags IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobs_tags_idx;
