-- Validates jobs_progress_range, jobs_metadata_object and jobs_metadata_size (00004): every
-- row has NULLs there, and VALIDATE holds SHARE UPDATE EXCLUSIVE, which
-- lets claims, reports and submits go on while it reads.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_progress_range;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_metadata_object;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_metadata_size;

-- +goose Down
-- A validated CHECK cannot be made NOT VALID again; drop and re-add it as
-- 00004 left it.
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs DROP CONSTRAINT jobs_progress_range;
ALTER TABLE jobs DROP CONSTRAINT jobs_metadata_object;
ALTER TABLE jobs DROP CONSTRAINT jobs_metadata_size;
ALTER TABLE jobs ADD CONSTRAINT jobs_progress_range CHECK (progress BETWEEN 0 AND 100) NOT VALID;
ALTER TABLE jobs ADD CONSTRAINT jobs_metadata_object CHECK (jsonb_typeof(metadata) = 'object') NOT VALID;
ALTER TABLE jobs ADD CONSTRAINT jobs_metadata_size CHECK (pg_column_size(metadata) <= 262144) NOT VALID;
