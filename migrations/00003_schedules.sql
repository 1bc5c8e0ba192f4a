-- +goose Up
-- Schedules (docs/schedules.md, docs/architecture.md). A schedule turns
-- into one ordinary job per occurrence. The scheduler reads due rows
-- (enabled AND next_run_at <= now) FOR UPDATE SKIP LOCKED, inserts the job
-- with a deterministic id (uuid v5 of schedule id and occurrence), and moves
-- next_run_at by compare-and-set in the same transaction, so any number of
-- scheduler replicas fire each occurrence exactly once.
CREATE TABLE schedules (
    id             uuid        PRIMARY KEY,
    name           text        NOT NULL,
    topic          text        NOT NULL,
    -- The args every fired job gets (a JSON object).
    args           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    priority       smallint    NOT NULL DEFAULT 0,
    max_attempts   integer     NOT NULL DEFAULT 25,
    -- 'at' (one RFC 3339 instant), 'every' (a Go duration, at least 1s) or
    -- 'cron' (robfig/cron, seconds field optional, descriptors allowed).
    kind           text        NOT NULL,
    expression     text        NOT NULL,
    -- The IANA zone a cron expression is read in.
    time_zone      text        NOT NULL DEFAULT 'UTC',
    enabled        boolean     NOT NULL DEFAULT true,
    -- The next occurrence to fire; NULL once an At schedule has fired.
    next_run_at    timestamptz,
    -- The occurrence fired last.
    last_fired_at  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT schedules_name_format CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    CONSTRAINT schedules_topic_format CHECK (topic ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    CONSTRAINT schedules_args_object CHECK (jsonb_typeof(args) = 'object'),
    CONSTRAINT schedules_priority_range CHECK (priority BETWEEN 0 AND 10),
    CONSTRAINT schedules_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 100),
    CONSTRAINT schedules_kind_known CHECK (kind IN ('at', 'every', 'cron')),
    CONSTRAINT schedules_expression_present CHECK (expression <> '')
);

CREATE UNIQUE INDEX schedules_name_key ON schedules (name);

-- The scheduler's due scan and its "sleep until the next one" read.
CREATE INDEX schedules_due_idx ON schedules (next_run_at) WHERE enabled AND next_run_at IS NOT NULL;

-- A schedule's fire history, newest first.
CREATE INDEX jobs_schedule_idx ON jobs (schedule_id, submitted_at DESC, id) WHERE schedule_id IS NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION schedules_stamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER schedules_stamp
    BEFORE UPDATE ON schedules
    FOR EACH ROW
    EXECUTE FUNCTION schedules_stamp();

-- Every change wakes the schedulers, so a created, updated, enabled or
-- disabled schedule takes effect without waiting for a reconcile.
-- +goose StatementBegin
CREATE FUNCTION schedules_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pulse_schedules_changed', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER schedules_notify
    AFTER INSERT OR UPDATE OR DELETE ON schedules
    FOR EACH STATEMENT
    EXECUTE FUNCTION schedules_notify();

-- +goose Down
DROP INDEX jobs_schedule_idx;
DROP TABLE schedules;
DROP FUNCTION schedules_notify();
DROP FUNCTION schedules_stamp();
