-- Validates the rule of 00010 that a blocked job is never runnable
-- (jobs_blocked_not_runnable). VALIDATE CONSTRAINT holds SHARE UPDATE
-- EXCLUSIVE, which lets claims, reports and submits go on while it scans.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_blocked_not_runnable;

-- +goose Down
-- Back to 00010's NOT VALID constraint (a catalog change).
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs
    DROP CONSTRAINT jobs_blocked_not_runnable,
    ADD CONSTRAINT jobs_blocked_not_runnable
        CHECK (blocked_by >= 0 AND (blocked_by = 0 OR status IN ('PENDING', 'CANCELED'))) NOT VALID;
