-- +goose NO TRANSACTION
-- +goose Up
-- Two things producers ask for when they come from River, Oban or asynq
-- (docs/comparison.md):
--
--   jobs.timeout        how long one attempt may run. The worker's SDK
--                       gives the handler a context with that deadline and
--                       fails an attempt that overruns it ("timed out after
--                       30s"), which then follows the retry policy like any
--                       failure. NULL: no timeout (the worker's per-topic
--                       default applies, if it has one). The lease and the
--                       reaper stay the backstop for a worker that dies.
--                       jobs_timeout_range: 1 second .. 24 hours.
--
--   job_uniques         "unique for a period": at most one job per topic
--                       and args (compared as jsonb's canonical text) per
--                       period, whatever that job's status. One row per key:
--                       the job holding it and when the period ends. The
--                       primary key is the rule: a submit claims the key in
--                       the same statement that inserts the job (INSERT ...
--                       ON CONFLICT (unique_key) DO UPDATE ... WHERE the
--                       period has ended), so two racing submits cannot both
--                       hold it; a submit that finds the key held returns
--                       the holder as a duplicate. An expired row is replaced
--                       by the next submit of the key, never deleted on its
--                       own. The holder must exist (foreign key, checked at
--                       the end of the statement that claims the key), and
--                       when retention deletes the job its key goes with it
--                       (ON DELETE CASCADE): the period ends early then.
--
-- And a schedule created without a priority fires jobs at priority 5, a
-- job's default (00003 defaulted schedules.priority to 0).
--
-- The key is md5(topic || E'\n' || args::text) as a uuid; a topic never
-- holds a newline, so the pair is unambiguous. jsonb's text is canonical
-- (key order, whitespace and duplicate keys do not matter) but numbers keep
-- their spelling: {"n": 1} and {"n": 1.0} are different args.
--
-- Because job_uniques references jobs, TRUNCATE jobs must name it too
-- (TRUNCATE jobs, job_uniques) or say CASCADE; jobs_guard_truncate still
-- refuses while a live job exists.
--
-- Outside a transaction, like 00004 and 00005: the CHECK is added NOT VALID
-- (a catalog change under a brief ACCESS EXCLUSIVE lock) and validated under
-- SHARE UPDATE EXCLUSIVE, which lets claims, reports and submits go on.
-- Every statement can be re-run.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS timeout interval;

ALTER TABLE jobs
    DROP CONSTRAINT IF EXISTS jobs_timeout_range,
    ADD CONSTRAINT jobs_timeout_range
        CHECK (timeout IS NULL OR (timeout >= interval '1 second' AND timeout <= interval '24 hours')) NOT VALID;

ALTER TABLE jobs VALIDATE CONSTRAINT jobs_timeout_range;

CREATE TABLE IF NOT EXISTS job_uniques (
    unique_key uuid        PRIMARY KEY,
    job_id     uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    -- When the holder claimed the key, and when its period ends.
    since      timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,

    -- unique_for is 1 second .. 366 days (jobspec holds the same bounds).
    CONSTRAINT job_uniques_period_range CHECK (
        isfinite(since) AND isfinite(expires_at)
        AND expires_at >= since + interval '1 second'
        AND expires_at <= since + interval '366 days')
);

-- Retention deletes jobs; each delete finds its key row (if any) through
-- this index for the cascade.
CREATE INDEX IF NOT EXISTS job_uniques_job_id_idx ON job_uniques (job_id);

-- A schedule created without a priority fires jobs at a job's default
-- priority, 5 (jobs.priority's default), not 0 (00003). control-api sends
-- the priority it resolved; this is the same default for a hand-written
-- INSERT. Existing schedules keep theirs.
ALTER TABLE schedules ALTER COLUMN priority SET DEFAULT 5;

-- +goose Down
ALTER TABLE schedules ALTER COLUMN priority SET DEFAULT 0;
DROP TABLE IF EXISTS job_uniques;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_timeout_range;
ALTER TABLE jobs DROP COLUMN IF EXISTS timeout;
