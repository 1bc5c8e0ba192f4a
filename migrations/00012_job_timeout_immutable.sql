-- +goose Up
-- A job's timeout (00008) is part of what its producer submitted, like its
-- args and its retry policy: it joins the identity guard, so no statement
-- can change it after the insert (jobs_identity_immutable). The guard is a
-- column trigger, so the claim, report, heartbeat and reap, which assign
-- none of these columns, never evaluate it.
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

CREATE OR REPLACE TRIGGER jobs_guard_identity
    BEFORE UPDATE OF id, topic, args, submitted_at, idempotency_key, schedule_id,
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

-- +goose Down
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
    END;
    IF col IS NULL THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'job identity is immutable: % of job % cannot change', col, OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable', COLUMN = col;
END
$$;
-- +goose StatementEnd

CREATE OR REPLACE TRIGGER jobs_guard_identity
    BEFORE UPDATE OF id, topic, args, submitted_at, idempotency_key, schedule_id,
                     retry_base, retry_max, retry_fixed ON jobs
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
    )
    EXECUTE FUNCTION jobs_guard_identity();
