-- Replace pending (ADR-0049): a submit that carries a replace_key takes
-- the place of the key's pending job of its topic instead of adding one,
-- while that job has never started: its args and run_at change in place
-- (modes replace, keep_earlier_run_at, keep_first). Once the job started,
-- the key's next submit inserts a new job. 00014 builds the partial unique
-- index that makes "the key's pending job" one row and that the submit's
-- INSERT ... ON CONFLICT names.
--
-- The identity guard (jobs_guard_identity, ADR-0020) gets the narrowest
-- exception that allows it: args may change only while the job is PENDING
-- with attempts 0 and no started_at, before and after, and only together
-- with replaced + 1; replaced moves in no other way. Every replacement
-- appends a row to job_replacements (what the args and run_at were, when
-- it was replaced), written by a trigger on the same UPDATE, so no
-- statement can change a job's args without leaving that history. The
-- history is append-only and goes with its job (retention).
--
-- The columns have no default or a constant one (catalog changes only).
-- The claim and the report never set args, replace_key or replaced, so
-- the column triggers below never fire on the hot path.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs
    ADD COLUMN replace_key text,
    ADD COLUMN replaced integer NOT NULL DEFAULT 0;

CREATE TABLE job_replacements (
    job_id        uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    -- 1 for the job's first replacement, then 2, 3, ... (jobs.replaced).
    n             integer     NOT NULL,
    replaced_at   timestamptz NOT NULL DEFAULT now(),
    -- What the replacement changed: the args and run_at before, and the
    -- run_at after (the args after are the next entry's args_before, or
    -- the job's args).
    args_before   jsonb       NOT NULL,
    run_at_before timestamptz NOT NULL,
    run_at_after  timestamptz NOT NULL,
    PRIMARY KEY (job_id, n),
    CONSTRAINT job_replacements_n_positive CHECK (n >= 1)
);

-- +goose StatementBegin
CREATE FUNCTION job_replacements_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- A row goes only with its job (ON DELETE CASCADE from jobs, when the
    -- job is already gone in the deleting statement's view).
    IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the replacement history of job % is append-only', OLD.job_id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'job_replacements_append_only';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER job_replacements_append_only
    BEFORE UPDATE OR DELETE ON job_replacements
    FOR EACH ROW
    EXECUTE FUNCTION job_replacements_append_only();

-- Birth: a job is born never replaced, with a replace_key of 1..255
-- characters when it has one (pulsetype.MaxReplaceKeyBytes bounds its
-- bytes at the edge). A BEFORE INSERT trigger, not a CHECK: no UPDATE can
-- change either column outside the rule below (ADR-0020).
-- +goose StatementBegin
CREATE FUNCTION jobs_guard_replace_birth() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    rule text := CASE WHEN NEW.replaced IS DISTINCT FROM 0 THEN 'jobs_born_pending'
                      ELSE 'jobs_replace_key_length' END;
BEGIN
    RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"', TG_TABLE_NAME, rule
        USING ERRCODE = 'check_violation', CONSTRAINT = rule, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_replace_birth
    BEFORE INSERT ON jobs
    FOR EACH ROW
    WHEN (NEW.replaced IS DISTINCT FROM 0
          OR (NEW.replace_key IS NOT NULL AND length(NEW.replace_key) NOT BETWEEN 1 AND 255))
    EXECUTE FUNCTION jobs_guard_replace_birth();

-- Identity, with the replacement exception (see above) and replace_key
-- immutable.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_guard_identity() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    col text;
    replacing boolean := OLD.status = 'PENDING' AND NEW.status = 'PENDING'
        AND OLD.attempts = 0 AND NEW.attempts = 0
        AND OLD.started_at IS NULL AND NEW.started_at IS NULL
        AND NEW.replaced = OLD.replaced + 1;
BEGIN
    col := CASE
        WHEN NEW.id IS DISTINCT FROM OLD.id THEN 'id'
        WHEN NEW.topic IS DISTINCT FROM OLD.topic THEN 'topic'
        WHEN NEW.args::text IS DISTINCT FROM OLD.args::text AND NOT replacing THEN 'args'
        WHEN NEW.submitted_at IS DISTINCT FROM OLD.submitted_at THEN 'submitted_at'
        WHEN NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key THEN 'idempotency_key'
        WHEN NEW.schedule_id IS DISTINCT FROM OLD.schedule_id THEN 'schedule_id'
        WHEN NEW.retry_base IS DISTINCT FROM OLD.retry_base THEN 'retry_base'
        WHEN NEW.retry_max IS DISTINCT FROM OLD.retry_max THEN 'retry_max'
        WHEN NEW.retry_fixed IS DISTINCT FROM OLD.retry_fixed THEN 'retry_fixed'
        WHEN NEW.timeout IS DISTINCT FROM OLD.timeout THEN 'timeout'
        WHEN NEW.replace_key IS DISTINCT FROM OLD.replace_key THEN 'replace_key'
        WHEN NEW.replaced IS DISTINCT FROM OLD.replaced AND NOT replacing THEN 'replaced'
    END;
    IF col IS NULL THEN
        RETURN NEW;
    END IF;
    IF col IN ('args', 'replaced') THEN
        RAISE EXCEPTION 'job % changes its % only by a replacement: while PENDING, never started, with replaced + 1', OLD.id, col
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable', COLUMN = col;
    END IF;
    RAISE EXCEPTION 'job identity is immutable: % of job % cannot change', col, OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable', COLUMN = col;
END
$$;
-- +goose StatementEnd

DROP TRIGGER jobs_guard_identity ON jobs;
CREATE TRIGGER jobs_guard_identity
    AFTER UPDATE OF id, topic, args, submitted_at, idempotency_key, schedule_id,
                    retry_base, retry_max, retry_fixed, timeout, replace_key, replaced ON jobs
    FOR EACH ROW
    WHEN (
        OLD.id IS DISTINCT FROM NEW.id
        OR OLD.topic IS DISTINCT FROM NEW.topic
        OR ((OLD.args::text IS DISTINCT FROM NEW.args::text OR OLD.replaced IS DISTINCT FROM NEW.replaced)
            AND NOT (OLD.status = 'PENDING' AND NEW.status = 'PENDING'
                     AND OLD.attempts = 0 AND NEW.attempts = 0
                     AND OLD.started_at IS NULL AND NEW.started_at IS NULL
                     AND NEW.replaced = OLD.replaced + 1))
        OR OLD.submitted_at IS DISTINCT FROM NEW.submitted_at
        OR OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key
        OR OLD.schedule_id IS DISTINCT FROM NEW.schedule_id
        OR OLD.retry_base IS DISTINCT FROM NEW.retry_base
        OR OLD.retry_max IS DISTINCT FROM NEW.retry_max
        OR OLD.retry_fixed IS DISTINCT FROM NEW.retry_fixed
        OR OLD.timeout IS DISTINCT FROM NEW.timeout
        OR OLD.replace_key IS DISTINCT FROM NEW.replace_key
    )
    EXECUTE FUNCTION jobs_guard_identity();

-- The history: one row per replacement, written by the UPDATE that
-- replaces (after jobs_guard_identity, by name, which refuses an illegal
-- one first).
-- +goose StatementBegin
CREATE FUNCTION jobs_record_replacement() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_replacements (job_id, n, args_before, run_at_before, run_at_after)
    VALUES (NEW.id, NEW.replaced, OLD.args, OLD.next_run_at, NEW.next_run_at);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_record_replacement
    AFTER UPDATE OF replaced ON jobs
    FOR EACH ROW
    WHEN (OLD.replaced IS DISTINCT FROM NEW.replaced)
    EXECUTE FUNCTION jobs_record_replacement();

-- +goose Down
SET LOCAL lock_timeout = '500ms';
DROP TRIGGER jobs_record_replacement ON jobs;
DROP FUNCTION jobs_record_replacement();
DROP TRIGGER jobs_guard_identity ON jobs;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_guard_identity() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    col text;
BEGIN
    col := CASE
        WHEN NEW.id IS DISTINCT FROM OLD.id THEN 'id'
        WHEN NEW.topic IS DISTINCT FROM OLD.topic THEN 'topic'
        WHEN NEW.args::text IS DISTINCT FROM OLD.args::text THEN 'args'
        WHEN NEW.submitted_at IS DISTINCT FROM OLD.submitted_at THEN 'submitted_at'
        WHEN NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key THEN 'idempotency_key'
        WHEN NEW.schedule_id IS DISTINCT FROM OLD.schedule_id THEN 'schedule_id'
        WHEN NEW.retry_base IS DISTINCT FROM OLD.retry_base THEN 'retry_base'
        WHEN NEW.retry_max IS DISTINCT FROM OLD.retry_max THEN 'retry_max'
        WHEN NEW.retry_fixed IS DISTINCT FROM OLD.retry_fixed THEN 'retry_fixed'
        WHEN NEW.timeout IS DISTINCT FROM OLD.timeout THEN 'timeout'
    END;
    IF col IS NULL THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'job identity is immutable: % of job % cannot change', col, OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable', COLUMN = col;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER jobs_guard_identity
    AFTER UPDATE OF id, topic, args, submitted_at, idempotency_key, schedule_id,
                    retry_base, retry_max, retry_fixed, timeout ON jobs
    FOR EACH ROW
    WHEN (
        OLD.id IS DISTINCT FROM NEW.id
        OR OLD.topic IS DISTINCT FROM NEW.topic
        OR OLD.args::text IS DISTINCT FROM NEW.args::text
        OR OLD.submitted_at IS DISTINCT FROM NEW.submitted_at
        OR OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key
        OR OLD.schedule_id IS DISTINCT FROM NEW.schedule_id
        OR OLD.retry_base IS DISTINCT FROM NEW.retry_base
        OR OLD.retry_max IS DISTINCT FROM NEW.retry_max
        OR OLD.retry_fixed IS DISTINCT FROM NEW.retry_fixed
        OR OLD.timeout IS DISTINCT FROM NEW.timeout
    )
    EXECUTE FUNCTION jobs_guard_identity();
DROP TRIGGER jobs_guard_replace_birth ON jobs;
DROP FUNCTION jobs_guard_replace_birth();
DROP TRIGGER job_replacements_append_only ON job_replacements;
DROP FUNCTION job_replacements_append_only();
DROP TABLE job_replacements;
ALTER TABLE jobs
    DROP COLUMN replaced,
    DROP COLUMN replace_key;
