-- +goose NO TRANSACTION
-- +goose Up
-- Fleet-wide concurrency limits per topic (docs/topics.md, ADR-0017). A
-- topic with a row here never has more than max_running RUNNING jobs:
-- every claim that may take a job of a limited topic holds that topic's
-- advisory lock from before its claim statement's snapshot until it
-- commits, and takes at most max_running - running of it
-- (jobstore/claim.go). A topic without a row costs the claim one probe of
-- this table's primary key.
--
-- Outside a transaction, so the index on jobs below is built
-- CONCURRENTLY: claims, reports and submits go on while it is. Every
-- statement may run again after a failure.
CREATE TABLE IF NOT EXISTS topic_limits (
    topic       text        PRIMARY KEY,
    -- 0 lets nothing of the topic start (like a drain pause of the topic,
    -- without its audit trail).
    max_running integer     NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- Who set the limit: the authenticated identity.
    updated_by  text        NOT NULL,

    -- The rule of jobs_topic_format (00004).
    CONSTRAINT topic_limits_topic_format CHECK (length(topic) <= 128 AND topic ~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$'),
    CONSTRAINT topic_limits_max_running_range CHECK (max_running BETWEEN 0 AND 1000000),
    CONSTRAINT topic_limits_updated_by_present CHECK (updated_by <> '')
);

-- +goose StatementBegin
-- A change of limits waits out every claim in flight and holds new claims
-- back until it commits, through the pause barrier (jobstore
-- PauseBarrierKey, taken shared by every claim until it commits). A claim
-- that decided a topic had no limit therefore commits before the limit
-- does, and every later claim sees it. control-api's SetTopicLimit takes
-- the barrier itself; this trigger makes a change typed in psql as exact.
CREATE OR REPLACE FUNCTION topic_limits_barrier() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(483006378853);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE OR REPLACE TRIGGER topic_limits_barrier
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON topic_limits
    FOR EACH STATEMENT
    EXECUTE FUNCTION topic_limits_barrier();

-- Dead-lettered jobs per topic (ListTopics, the dashboard) without reading
-- every finished job retention keeps. Cheap to keep: a row enters it once,
-- when it dead-letters; no claim, heartbeat or report of a live job writes
-- to it. A failed earlier run may have left an invalid index: drop it.
DROP INDEX CONCURRENTLY IF EXISTS jobs_dead_lettered_topic_idx;
CREATE INDEX CONCURRENTLY jobs_dead_lettered_topic_idx ON jobs (topic) WHERE status = 'DEAD_LETTERED';

-- +goose Down
DROP INDEX IF EXISTS jobs_dead_lettered_topic_idx;
DROP TABLE IF EXISTS topic_limits;
DROP FUNCTION IF EXISTS topic_limits_barrier();
