-- Validates jobs_result_only_completed and jobs_result_size (00002): every row has a NULL
-- result, so the scan finds nothing, and it holds SHARE UPDATE EXCLUSIVE,
-- which lets claims, reports and submits go on while it reads.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_result_only_completed;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_result_size;

-- +goose Down
-- A validated CHECK cannot be made NOT VALID again; drop and re-add it as
-- 00002 left it.
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs DROP CONSTRAINT jobs_result_only_completed;
ALTER TABLE jobs DROP CONSTRAINT jobs_result_size;
ALTER TABLE jobs ADD CONSTRAINT jobs_result_only_completed
    CHECK (result IS NULL OR status = 'COMPLETED') NOT VALID;
ALTER TABLE jobs ADD CONSTRAINT jobs_result_size
    CHECK (octet_length(result) <= 1048576) NOT VALID;
