-- Rate limits (ADR-0051, docs/flow-control.md): at most rate_limit starts
-- of a topic per rate_interval, fleet-wide, per rate key when the topic
-- names a key source, decided by the limited claim under the topic's
-- advisory lock (jobstore/claim.go, rate_head), the lock that makes
-- max_running exact.
--
--   - topic_limits gains rate_limit, rate_interval and rate_key (the key
--     source: 'none', 'job' — the job's rate_key —, or 'args:<field>'),
--     and max_running becomes nullable: a topic may have a rate limit and
--     no cap on RUNNING jobs. A row holds at least one limit.
--   - jobs.rate_key is the job's key, given at submit or extracted there
--     from the args field the topic names, so the claim never parses args.
--     It never changes (jobs_guard_rate_key); its form is a birth rule
--     (a BEFORE INSERT trigger, not a CHECK: no UPDATE can change it,
--     ADR-0020).
--   - topic_rate_log is the sliding log: one row per start of a
--     rate-limited topic, written by the claim that started it, in the
--     same transaction, and pruned by the topic's next claims once older
--     than the interval.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs ADD COLUMN rate_key text;

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_rate_key_birth() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"', TG_TABLE_NAME, 'jobs_rate_key_format'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_rate_key_format', TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_rate_key_birth
    BEFORE INSERT ON jobs
    FOR EACH ROW
    WHEN (NEW.rate_key IS NOT NULL AND (NEW.rate_key = '' OR octet_length(NEW.rate_key) > 255))
    EXECUTE FUNCTION jobs_guard_rate_key_birth();

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_rate_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'job identity is immutable: % of job % cannot change', 'rate_key', OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable', COLUMN = 'rate_key';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_rate_key
    AFTER UPDATE OF rate_key ON jobs
    FOR EACH ROW
    WHEN (OLD.rate_key IS DISTINCT FROM NEW.rate_key)
    EXECUTE FUNCTION jobs_guard_rate_key();

ALTER TABLE topic_limits
    ALTER COLUMN max_running DROP NOT NULL,
    ADD COLUMN rate_limit integer,
    ADD COLUMN rate_interval interval,
    ADD COLUMN rate_key text,
    ADD CONSTRAINT topic_limits_rate_limit_range CHECK (rate_limit BETWEEN 1 AND 10000),
    ADD CONSTRAINT topic_limits_rate_interval_range
        CHECK (rate_interval BETWEEN interval '1 millisecond' AND interval '1 day'),
    ADD CONSTRAINT topic_limits_rate_complete CHECK (
        (rate_limit IS NULL AND rate_interval IS NULL AND rate_key IS NULL)
        OR (rate_limit IS NOT NULL AND rate_interval IS NOT NULL AND rate_key IS NOT NULL)),
    ADD CONSTRAINT topic_limits_rate_key_source CHECK (
        rate_key IN ('none', 'job')
        OR (rate_key LIKE 'args:%' AND length(rate_key) BETWEEN 6 AND 133)),
    ADD CONSTRAINT topic_limits_has_a_limit CHECK (max_running IS NOT NULL OR rate_limit IS NOT NULL);

CREATE TABLE topic_rate_log (
    topic      text        NOT NULL,
    -- The job's rate key ('' for a topic limited as a whole, or a job
    -- without a key).
    key        text        NOT NULL,
    started_at timestamptz NOT NULL
);
-- The claim counts a key's starts in the window by the first, and prunes
-- what the window has passed by the second.
CREATE INDEX topic_rate_log_window_idx ON topic_rate_log (topic, key, started_at);
CREATE INDEX topic_rate_log_prune_idx ON topic_rate_log (topic, started_at);

-- +goose Down
SET LOCAL lock_timeout = '500ms';
DROP TABLE topic_rate_log;
DELETE FROM topic_limits WHERE max_running IS NULL;
ALTER TABLE topic_limits
    DROP CONSTRAINT topic_limits_has_a_limit,
    DROP CONSTRAINT topic_limits_rate_key_source,
    DROP CONSTRAINT topic_limits_rate_complete,
    DROP CONSTRAINT topic_limits_rate_interval_range,
    DROP CONSTRAINT topic_limits_rate_limit_range,
    DROP COLUMN rate_key,
    DROP COLUMN rate_interval,
    DROP COLUMN rate_limit,
    ALTER COLUMN max_running SET NOT NULL;
DROP TRIGGER jobs_guard_rate_key ON jobs;
DROP FUNCTION jobs_guard_rate_key();
DROP TRIGGER jobs_guard_rate_key_birth ON jobs;
DROP FUNCTION jobs_guard_rate_key_birth();
ALTER TABLE jobs DROP COLUMN rate_key;
