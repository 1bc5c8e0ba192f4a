-- Per-key concurrency, fairness across keys and sequences (ADR-0054,
-- docs/flow-control.md), decided by the limited claim under the topic's
-- advisory lock (jobstore/claim.go, key_head), the lock that makes
-- max_running exact.
--
--   - jobs.concurrency_key: the key a topic's max_running_per_key counts
--     RUNNING jobs by, and the lane the claim rotates over for fairness.
--   - jobs.sequence_key: jobs of one topic with the same key start one at
--     a time, in submit order. jobs.sequence_pos is that order, taken at
--     insert from jobs_sequence_pos_seq under a lock on (topic, key) held
--     until the submit commits, so position order is commit order within
--     a key: a claim never sees a later job of a key without every
--     earlier one.
--   - All three never change (jobs_guard_keys); the keys' form is a birth
--     rule (a BEFORE INSERT trigger, not a CHECK: no UPDATE can change
--     them, ADR-0020). A sequenced job needs its topic's sequence policy
--     (topic_limits.sequence_on_failure), read FOR SHARE so that the
--     policy cannot be cleared under a submit.
--   - topic_limits gains max_running_per_key and sequence_on_failure
--     ('block': a dead-lettered head holds its key until retried or
--     canceled; 'continue': it no longer does). A topic keyed this way
--     cannot also have a rate limit (topic_limits_keys_or_rate).
--   - topic_key_cursors: per keyed topic, the lane its last claim ended
--     on, written by the claim under the topic's lock: the round-robin's
--     position, shared by every gateway.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs
    ADD COLUMN concurrency_key text,
    ADD COLUMN sequence_key text,
    ADD COLUMN sequence_pos bigint;

CREATE SEQUENCE jobs_sequence_pos_seq;

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_keys_birth() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad text := CASE
        WHEN NEW.concurrency_key IS NOT NULL AND (NEW.concurrency_key = '' OR octet_length(NEW.concurrency_key) > 255)
            THEN 'jobs_concurrency_key_format'
        WHEN NEW.sequence_key IS NOT NULL AND (NEW.sequence_key = '' OR octet_length(NEW.sequence_key) > 255)
            THEN 'jobs_sequence_key_format'
        WHEN NEW.sequence_key IS NULL AND NEW.sequence_pos IS NOT NULL
            THEN 'jobs_sequence_pos_assigned'
    END;
BEGIN
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"', TG_TABLE_NAME, bad
            USING ERRCODE = 'check_violation', CONSTRAINT = bad, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    IF NEW.sequence_key IS NOT NULL THEN
        PERFORM 1 FROM topic_limits WHERE topic = NEW.topic AND sequence_on_failure IS NOT NULL FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'new row for relation "%" violates check constraint "%": topic % has no sequence policy', TG_TABLE_NAME, 'jobs_sequence_key_topic', NEW.topic
                USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_sequence_key_topic', TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
        END IF;
        -- 1886743668 ("pult"): the sequence lock space, beside the topic
        -- limits' (jobstore.TopicLimitLockSpace).
        PERFORM pg_advisory_xact_lock(1886743668, hashtext(NEW.topic || ' ' || NEW.sequence_key));
        NEW.sequence_pos := nextval('jobs_sequence_pos_seq');
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_keys_birth
    BEFORE INSERT ON jobs
    FOR EACH ROW
    WHEN (NEW.concurrency_key IS NOT NULL OR NEW.sequence_key IS NOT NULL OR NEW.sequence_pos IS NOT NULL)
    EXECUTE FUNCTION jobs_guard_keys_birth();

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_keys() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    col text := CASE
        WHEN NEW.concurrency_key IS DISTINCT FROM OLD.concurrency_key THEN 'concurrency_key'
        WHEN NEW.sequence_key IS DISTINCT FROM OLD.sequence_key THEN 'sequence_key'
        ELSE 'sequence_pos'
    END;
BEGIN
    RAISE EXCEPTION 'job identity is immutable: % of job % cannot change', col, OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable', COLUMN = col;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_keys
    AFTER UPDATE OF concurrency_key, sequence_key, sequence_pos ON jobs
    FOR EACH ROW
    WHEN (OLD.concurrency_key IS DISTINCT FROM NEW.concurrency_key
          OR OLD.sequence_key IS DISTINCT FROM NEW.sequence_key
          OR OLD.sequence_pos IS DISTINCT FROM NEW.sequence_pos)
    EXECUTE FUNCTION jobs_guard_keys();

ALTER TABLE topic_limits
    ADD COLUMN max_running_per_key integer,
    ADD COLUMN sequence_on_failure text,
    ADD CONSTRAINT topic_limits_max_running_per_key_range CHECK (max_running_per_key BETWEEN 1 AND 1000000),
    ADD CONSTRAINT topic_limits_sequence_on_failure_known CHECK (sequence_on_failure IN ('block', 'continue')),
    ADD CONSTRAINT topic_limits_keys_or_rate CHECK (
        rate_limit IS NULL OR (max_running_per_key IS NULL AND sequence_on_failure IS NULL)),
    DROP CONSTRAINT topic_limits_has_a_limit,
    ADD CONSTRAINT topic_limits_has_a_limit CHECK (
        max_running IS NOT NULL OR rate_limit IS NOT NULL
        OR max_running_per_key IS NOT NULL OR sequence_on_failure IS NOT NULL);

CREATE TABLE topic_key_cursors (
    topic     text PRIMARY KEY,
    -- The lane the topic's last claim ended on: 'c' and a concurrency
    -- key, 's' and a sequence key, or '' for the jobs with neither.
    last_lane text NOT NULL
);

-- +goose Down
SET LOCAL lock_timeout = '500ms';
DROP TABLE topic_key_cursors;
DELETE FROM topic_limits WHERE max_running IS NULL AND rate_limit IS NULL;
ALTER TABLE topic_limits
    DROP CONSTRAINT topic_limits_has_a_limit,
    ADD CONSTRAINT topic_limits_has_a_limit CHECK (max_running IS NOT NULL OR rate_limit IS NOT NULL),
    DROP CONSTRAINT topic_limits_keys_or_rate,
    DROP CONSTRAINT topic_limits_sequence_on_failure_known,
    DROP CONSTRAINT topic_limits_max_running_per_key_range,
    DROP COLUMN sequence_on_failure,
    DROP COLUMN max_running_per_key;
DROP TRIGGER jobs_guard_keys ON jobs;
DROP FUNCTION jobs_guard_keys();
DROP TRIGGER jobs_guard_keys_birth ON jobs;
DROP FUNCTION jobs_guard_keys_birth();
DROP SEQUENCE jobs_sequence_pos_seq;
ALTER TABLE jobs
    DROP COLUMN sequence_pos,
    DROP COLUMN sequence_key,
    DROP COLUMN concurrency_key;
