-- A job's rows in job_dependencies and job_replacements go with it by one
-- statement per deleting statement, not by one per deleted row
-- (ADR-0058). The four ON DELETE CASCADE foreign keys to jobs cost a
-- retention DELETE of 1,000 finished jobs about 20 ms of its 25:
-- Postgres fires each key's cascade once per deleted row, four queries
-- per job, though almost every job has no such rows. job_uniques keeps
-- its key: a unique submit writes a row there for every unique job, and
-- the key's check, in C, is what catches the submit's race (ADR-0016).
--
-- The other three keys' two halves become triggers that keep the keys'
-- names, their error code (foreign_key_violation) and their locking:
--   - a row of the three tables must name a job: checked after each row
--     written, like the key's check, with the job's row locked FOR KEY
--     SHARE until commit, so no concurrent DELETE of the job can leave it
--     dangling. The check runs when the writing statement ends, so a
--     statement that inserts jobs and their rows together sees its jobs;
--   - a DELETE of jobs deletes their rows in its statement trigger, one
--     set-based DELETE per table over the deleted ids (a transition
--     table), through the tables' indexes; a TRUNCATE of jobs empties
--     them too.
-- ALTER TABLE on jobs takes its lock only for catalog changes; the
-- lock_timeout makes it give up and be retried rather than hold the
-- workload behind it.

-- +goose Up
SET LOCAL lock_timeout = '500ms';

ALTER TABLE job_replacements DROP CONSTRAINT job_replacements_job_id_fkey;
ALTER TABLE job_dependencies DROP CONSTRAINT job_dependencies_child_id_fkey;
ALTER TABLE job_dependencies DROP CONSTRAINT job_dependencies_parent_id_fkey;

-- pulse_job_referenced raises the foreign-key error a row of a table that
-- names a job gets when the job does not exist; otherwise it locks the
-- job's row FOR KEY SHARE, as the key's check did.
-- +goose StatementBegin
CREATE FUNCTION pulse_job_referenced(job uuid, tab text, col text, constraint_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM FROM jobs WHERE id = job FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"', tab, constraint_name
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = constraint_name, TABLE = tab, COLUMN = col,
                  DETAIL = format('Key (%s)=(%s) is not present in table "jobs".', col, job);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION job_replacements_job_exists() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pulse_job_referenced(NEW.job_id, 'job_replacements', 'job_id', 'job_replacements_job_id_fkey');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION job_dependencies_jobs_exist() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pulse_job_referenced(NEW.parent_id, 'job_dependencies', 'parent_id', 'job_dependencies_parent_id_fkey');
    PERFORM pulse_job_referenced(NEW.child_id, 'job_dependencies', 'child_id', 'job_dependencies_child_id_fkey');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER job_replacements_job_id_fkey AFTER INSERT OR UPDATE OF job_id ON job_replacements
    FOR EACH ROW EXECUTE FUNCTION job_replacements_job_exists();
CREATE CONSTRAINT TRIGGER job_dependencies_jobs_fkey AFTER INSERT OR UPDATE OF parent_id, child_id ON job_dependencies
    FOR EACH ROW EXECUTE FUNCTION job_dependencies_jobs_exist();

-- jobs_delete_references deletes the deleted jobs' rows. It runs at trigger
-- depth 1, where the tables' own delete guards let a job's rows go with it.
-- +goose StatementBegin
CREATE FUNCTION jobs_delete_references() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ids uuid[];
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM job_dependencies;
        DELETE FROM job_replacements;
        RETURN NULL;
    END IF;
    ids := ARRAY(SELECT id FROM deleted_jobs);
    DELETE FROM job_dependencies WHERE parent_id = ANY (ids);
    DELETE FROM job_dependencies WHERE child_id = ANY (ids);
    DELETE FROM job_replacements WHERE job_id = ANY (ids);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_delete_references AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_delete_references();
CREATE TRIGGER jobs_truncate_references AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_delete_references();

-- +goose Down
SET LOCAL lock_timeout = '500ms';

DROP TRIGGER jobs_truncate_references ON jobs;
DROP TRIGGER jobs_delete_references ON jobs;
DROP FUNCTION jobs_delete_references();
DROP TRIGGER job_dependencies_jobs_fkey ON job_dependencies;
DROP TRIGGER job_replacements_job_id_fkey ON job_replacements;
DROP FUNCTION job_dependencies_jobs_exist();
DROP FUNCTION job_replacements_job_exists();
DROP FUNCTION pulse_job_referenced(uuid, text, text, text);

ALTER TABLE job_replacements ADD CONSTRAINT job_replacements_job_id_fkey
    FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE;
ALTER TABLE job_dependencies ADD CONSTRAINT job_dependencies_child_id_fkey
    FOREIGN KEY (child_id) REFERENCES jobs(id) ON DELETE CASCADE;
ALTER TABLE job_dependencies ADD CONSTRAINT job_dependencies_parent_id_fkey
    FOREIGN KEY (parent_id) REFERENCES jobs(id) ON DELETE CASCADE;
