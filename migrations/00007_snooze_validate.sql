-- +goose Up
-- Validates the CHECKs 00006 replaced NOT VALID. VALIDATE CONSTRAINT
-- holds SHARE UPDATE EXCLUSIVE while it scans jobs, which lets claims,
-- reports and submits go on.
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_attempts_within_max;
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_queued_has_attempts_left;

-- +goose Down
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs
    DROP CONSTRAINT jobs_attempts_within_max,
    ADD CONSTRAINT jobs_attempts_within_max
        CHECK (attempts >= 0 AND snoozes BETWEEN 0 AND attempts AND attempts - snoozes <= max_attempts) NOT VALID,
    DROP CONSTRAINT jobs_queued_has_attempts_left,
    ADD CONSTRAINT jobs_queued_has_attempts_left
        CHECK (status NOT IN ('PENDING', 'RETRYING') OR attempts - snoozes < max_attempts) NOT VALID;
