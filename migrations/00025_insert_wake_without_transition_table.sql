-- The insert trigger no longer copies every inserted row into a
-- transition table (ADR-0067). A statement trigger that declares
-- REFERENCING NEW TABLE makes Postgres store each row an INSERT writes in
-- a tuplestore for it, whatever the trigger then does: measured, that copy
-- was a third of a 1,000-job INSERT's execution time (21 ms against
-- 15 ms without the trigger, 11 ms without any), on every batch
-- control-api submits — whose wake control-api sends itself after the
-- commit (ADR-0061) and could name without the trigger's help.
--
-- Now a row trigger wakes the gateways, and only for the transactions
-- that do not send their own wake: a producer's own transaction
-- (pulsetx), the scheduler's fires, psql. Its WHEN clause reads one
-- setting per row; a transaction that set pulse.wakes_sent = 'on'
-- (control-api's submits, which name their topics and submit time in
-- pulse.ready_payloads themselves) never calls the function at all. The
-- payloads are the same as before: '<topic>' with ' new' when the jobs'
-- transaction began within 10 ms (00020), and Postgres sends one
-- notification per distinct payload of a transaction. A control-api of
-- the build before (pulse.ready_after_commit = 'on' without
-- pulse.wakes_sent) still gets its payloads collected for it, one row at
-- a time.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
DROP TRIGGER jobs_notify_insert ON jobs;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    IF current_setting('pulse.ready_after_commit', true) = 'on' THEN
        payload := NEW.topic || ' at ' || (extract(epoch FROM transaction_timestamp()) * 1000000)::bigint;
        IF strpos(',' || current_setting('pulse.ready_payloads', true) || ',', ',' || payload || ',') = 0 THEN
            PERFORM set_config('pulse.ready_payloads',
                               concat_ws(',', NULLIF(current_setting('pulse.ready_payloads', true), ''), payload),
                               false);
        END IF;
        RETURN NULL;
    END IF;
    PERFORM pg_notify('pulse_jobs_ready', NEW.topic ||
        CASE WHEN clock_timestamp() - transaction_timestamp() < interval '10 milliseconds' THEN ' new' ELSE '' END);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_notify_insert AFTER INSERT ON jobs
FOR EACH ROW
WHEN (current_setting('pulse.wakes_sent', true) IS DISTINCT FROM 'on'
      AND NEW.status = 'PENDING' AND NEW.next_run_at <= now())
EXECUTE FUNCTION jobs_notify_insert();

-- +goose Down
SET LOCAL lock_timeout = '500ms';
DROP TRIGGER jobs_notify_insert ON jobs;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    marker text := CASE WHEN clock_timestamp() - transaction_timestamp() < interval '10 milliseconds'
                        THEN ' new' ELSE '' END;
BEGIN
    IF current_setting('pulse.ready_after_commit', true) = 'on' THEN
        marker := ' at ' || (extract(epoch FROM transaction_timestamp()) * 1000000)::bigint;
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

CREATE TRIGGER jobs_notify_insert AFTER INSERT ON jobs
REFERENCING NEW TABLE AS inserted_jobs
FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_insert();
