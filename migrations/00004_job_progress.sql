-- A running job's progress and metadata (ADR-0043): what its handler
-- reports while it runs (job.SetProgress, job.SetMetadata), for operators
-- and callers to watch. progress is a percentage; metadata a JSON object
-- the handler's writes merge into, at most 256 KiB as stored
-- (pulsetype.MaxMetadataStoredBytes; pg_column_size reads the stored
-- size without decoding it, so the CHECK costs the hot path nothing). They keep their last values when the
-- attempt ends (a retry starts from what the last attempt said).
--
-- Only the lease holder writes them, fenced like a heartbeat: the
-- gateway's statement matches status RUNNING, the attempt and locked_by;
-- and the schema refuses any change of either column in an UPDATE that is
-- not within one RUNNING attempt (jobs_progress_lease_holder_only): a
-- claim, a report, a reap, a cancel or an operator cannot write them, nor
-- can a write land on a job that is not running. The guard is a column
-- trigger (UPDATE OF progress, metadata), so claims, heartbeats and
-- reports, which never name those columns, never evaluate it.
--
-- The CHECKs are added NOT VALID (catalog only) and validated by 00005.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs ADD COLUMN progress smallint;
ALTER TABLE jobs ADD COLUMN metadata jsonb;
ALTER TABLE jobs ADD CONSTRAINT jobs_progress_range CHECK (progress BETWEEN 0 AND 100) NOT VALID;
ALTER TABLE jobs ADD CONSTRAINT jobs_metadata_object CHECK (jsonb_typeof(metadata) = 'object') NOT VALID;
ALTER TABLE jobs ADD CONSTRAINT jobs_metadata_size CHECK (pg_column_size(metadata) <= 262144) NOT VALID;

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_progress() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'progress and metadata of job % change only within its running attempt, by its lease holder (% % -> % %)',
        OLD.id, OLD.status, OLD.attempts, NEW.status, NEW.attempts
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_progress_lease_holder_only';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_progress
    AFTER UPDATE OF progress, metadata ON jobs
    FOR EACH ROW
    WHEN (
        (OLD.progress IS DISTINCT FROM NEW.progress OR OLD.metadata IS DISTINCT FROM NEW.metadata)
        AND NOT (OLD.status = 'RUNNING' AND NEW.status = 'RUNNING'
                 AND OLD.attempts = NEW.attempts AND OLD.locked_by = NEW.locked_by)
    )
    EXECUTE FUNCTION jobs_guard_progress();

-- +goose Down
DROP TRIGGER jobs_guard_progress ON jobs;
DROP FUNCTION jobs_guard_progress();
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs DROP CONSTRAINT jobs_metadata_object;
ALTER TABLE jobs DROP CONSTRAINT jobs_progress_range;
ALTER TABLE jobs DROP COLUMN metadata;
ALTER TABLE jobs DROP COLUMN progress;
