-- An insert's wake sent after its commit names when its jobs were
-- submitted (ADR-0063): '<topic> at <microseconds since the epoch>', the
-- inserting transaction's start, which is every inserted job's
-- submitted_at. A gateway's claims resume after the last job they took,
-- less a 25 ms margin for inserts that commit after a later one was
-- claimed (ADR-0050); an insert that ran or waited for its commit longer
-- than that sorted behind the cursor and waited for a rescan, which an
-- old snapshot spaces out to seconds. With the time in the wake, the
-- gateway that finds it behind its cursor claims from exactly there.
--
-- Only the wake sent after the commit (pulse.ready_after_commit, 00023)
-- carries the time: it is sent once the jobs are visible, so the time is
-- all a gateway needs. A transaction that notifies at its commit (a
-- producer's own with pulsetx, psql) keeps the payloads of 00020: the
-- topic, with ' new' when the statement ran within 10 ms of its
-- transaction's start. A gateway of an earlier build reads
-- '<topic> at ...' as a topic it does not know and claims as for any
-- wake.

-- +goose Up
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

-- +goose Down
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
