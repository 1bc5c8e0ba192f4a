-- +goose Up
-- A test migration: a CHECK on jobs, added NOT VALID (a catalog change
-- under a brief ACCESS EXCLUSIVE lock, no scan), with its own
-- lock_timeout, as migrations/README.md asks. 00004 validates it.
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs ADD CONSTRAINT jobs_traceparent_length
    CHECK (traceparent IS NULL OR length(traceparent) <= 55) NOT VALID;

-- +goose Down
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs DROP CONSTRAINT jobs_traceparent_length;
