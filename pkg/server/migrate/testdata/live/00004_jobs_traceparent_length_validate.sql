-- +goose Up
-- A test migration: VALIDATE scans every row under SHARE UPDATE EXCLUSIVE,
-- which lets claims, reports and submits go on; it still needs the lock,
-- so it sets its lock_timeout like any ALTER TABLE jobs.
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_traceparent_length;

-- +goose Down
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs
    DROP CONSTRAINT jobs_traceparent_length,
    ADD CONSTRAINT jobs_traceparent_length
        CHECK (traceparent IS NULL OR length(traceparent) <= 55) NOT VALID;
