-- An insert may have its wake sent after its commit instead of at it
-- (ADR-0061). Postgres serializes the commits of every transaction that
-- sent a NOTIFY, across the whole cluster: from the moment such a
-- transaction starts to commit until its commit record is on disk, it
-- holds one lock (an AccessExclusiveLock on "database 0") that every
-- other notifying commit waits for. Each submit's INSERT notified from
-- this trigger, so submits committed one WAL flush at a time, never
-- several in one flush, and under load waited for each other there.
--
-- A transaction that sets pulse.ready_after_commit to 'on' (locally) gets
-- no NOTIFY from this trigger: the payloads the trigger would have sent
-- are appended, comma-separated, to the session setting
-- pulse.ready_payloads, and the inserter sends them in a transaction of
-- its own right after the commit (jobstore: one round trip, the same
-- connection). A transaction that only notifies writes no WAL of its own,
-- so its commit does not wait for a flush and holds the lock for
-- microseconds. Every other transaction (a producer's own with pulsetx,
-- psql) notifies at its commit, as before. Payloads are what they were:
-- the topic, with ' new' when the inserting statement ran within 10 ms of
-- its transaction's start (ADR-0055); a topic holds no comma.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    marker text := CASE WHEN clock_timestamp() - transaction_timestamp() < interval '10 milliseconds'
                        THEN ' new' ELSE '' END;
BEGIN
    IF current_setting('pulse.ready_after_commit', true) = 'on' THEN
        PERFORM set_config('pulse.ready_payloads',
                           concat_ws(',', NULLIF(current_setting('pulse.ready_payloads', true), ''),
                                     string_agg(t.topic || marker, ',')),
                           false)
        FROM (SELECT DISTINCT topic FROM inserted_jobs
              WHERE status = 'PENDING' AND next_run_at <= now()) AS t;
        RETURN NULL;
    END IF;
    PERFORM pg_notify('pulse_jobs_ready', t.topic || marker)
    FROM (SELECT DISTINCT topic FROM inserted_jobs
          WHERE status = 'PENDING' AND next_run_at <= now()) AS t;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    marker text := CASE WHEN clock_timestamp() - transaction_timestamp() < interval '10 milliseconds'
                        THEN ' new' ELSE '' END;
BEGIN
    PERFORM pg_notify('pulse_jobs_ready', t.topic || marker)
    FROM (SELECT DISTINCT topic FROM inserted_jobs
          WHERE status = 'PENDING' AND next_run_at <= now()) AS t;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
