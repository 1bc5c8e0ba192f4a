-- A unique job's key in job_uniques goes with its job by one statement per
-- deleting statement, not by one cascade per deleted row (ADR-0068), as
-- the rows of job_dependencies and job_replacements already do (00022,
-- ADR-0058). Its ON DELETE CASCADE foreign key was the last one to jobs:
-- every job retention deletes paid a query against job_uniques, though
-- only unique jobs have a row there; in a soak at 9,500 jobs/s the
-- cascade was 9 % of Postgres's CPU.
--
-- The key's two halves become triggers that keep its name, its error code
-- (foreign_key_violation) and its locking, as 00022's do:
--   - a key must name a job: checked when the writing statement ends,
--     over the rows it wrote, with their jobs' rows locked FOR KEY SHARE
--     until commit. The unique submit relies on it: a statement that
--     claims a key for a job it then does not insert (an idempotency key
--     taken by a transaction that committed after its snapshot) fails
--     whole with job_uniques_job_id_fkey and is run again (ADR-0016).
--     The check runs with the privileges of the schema's owner, as the
--     key's did, so an application's role needs no more than before
--     (docs/transactional-enqueue.md lists its grants);
--   - a DELETE of jobs deletes their keys in jobs_delete_references, one
--     set-based DELETE over the deleted ids; a TRUNCATE of jobs empties
--     job_uniques, so TRUNCATE jobs no longer needs to name it.

-- +goose Up
SET LOCAL lock_timeout = '500ms';

ALTER TABLE job_uniques DROP CONSTRAINT job_uniques_job_id_fkey;

-- job_uniques_jobs_exist checks every key a statement wrote at once (a
-- unique submit writes one per unique job, all in one statement), as a
-- statement trigger over the written rows: one call and one set-based
-- lookup per statement, where a constraint trigger would run a PL/pgSQL
-- call per key. It runs as the function's owner (the schema's owner): FOR
-- KEY SHARE needs more than an application's SELECT on jobs, and the
-- foreign key's own check never asked the writer for it. Its search path
-- is pinned to the schema this migration runs in, with pg_temp last, so
-- no caller's temporary table can stand in for jobs.
-- +goose StatementBegin
DO $migration$
BEGIN
    EXECUTE format($create$
        CREATE FUNCTION job_uniques_jobs_exist() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %I, pg_temp AS $body$
        DECLARE
            ids uuid[] := ARRAY(SELECT DISTINCT job_id FROM written_keys);
            locked bigint;
            missing uuid;
        BEGIN
            -- By ANY over an array, as the hot statements join jobs
            -- (ADR-0059): a probe of the primary key per key, whatever
            -- the planner guesses of a transition table.
            SELECT count(*) INTO locked FROM (SELECT FROM jobs WHERE id = ANY (ids) FOR KEY SHARE) AS l;
            IF locked < cardinality(ids) THEN
                SELECT x INTO missing FROM unnest(ids) AS x
                WHERE NOT EXISTS (SELECT FROM jobs WHERE id = x) LIMIT 1;
                RAISE EXCEPTION 'insert or update on table "job_uniques" violates foreign key constraint "job_uniques_job_id_fkey"'
                    USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'job_uniques_job_id_fkey',
                          TABLE = 'job_uniques', COLUMN = 'job_id',
                          DETAIL = format('Key (job_id)=(%%s) is not present in table "jobs".', missing);
            END IF;
            RETURN NULL;
        END
        $body$
    $create$, current_schema());
END
$migration$;
-- +goose StatementEnd

CREATE TRIGGER job_uniques_job_id_fkey AFTER INSERT ON job_uniques
    REFERENCING NEW TABLE AS written_keys
    FOR EACH STATEMENT EXECUTE FUNCTION job_uniques_jobs_exist();
CREATE TRIGGER job_uniques_job_id_fkey_update AFTER UPDATE ON job_uniques
    REFERENCING NEW TABLE AS written_keys
    FOR EACH STATEMENT EXECUTE FUNCTION job_uniques_jobs_exist();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_delete_references() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ids uuid[];
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM job_dependencies;
        DELETE FROM job_replacements;
        DELETE FROM job_uniques;
        RETURN NULL;
    END IF;
    ids := ARRAY(SELECT id FROM deleted_jobs);
    DELETE FROM job_dependencies WHERE parent_id = ANY (ids);
    DELETE FROM job_dependencies WHERE child_id = ANY (ids);
    DELETE FROM job_replacements WHERE job_id = ANY (ids);
    DELETE FROM job_uniques WHERE job_id = ANY (ids);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '500ms';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_delete_references() RETURNS trigger
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

DROP TRIGGER job_uniques_job_id_fkey_update ON job_uniques;
DROP TRIGGER job_uniques_job_id_fkey ON job_uniques;
DROP FUNCTION job_uniques_jobs_exist();

ALTER TABLE job_uniques ADD CONSTRAINT job_uniques_job_id_fkey
    FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE;
