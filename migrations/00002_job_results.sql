-- Job results (ADR-0041). A handler may return a result: the JSON text the
-- worker sent, byte for byte, stored by the report that settles the
-- attempt COMPLETED, in the same statement. bytea, not jsonb: what a
-- caller reads back is exactly what the handler produced, and its size is
-- a length the CHECK reads without parsing (octet_length of a bytea reads
-- the header). The gateway checks it is JSON and at most
-- PULSE_MAX_RESULT_BYTES; the schema holds the hard cap
-- (pulsetype.MaxResultBytes) and the rule that only a COMPLETED job has a
-- result. COMPLETED is final (jobs_guard_transition), so a stored result
-- never changes, and retention deletes it with its job.
--
-- settle_listeners and pulse_notify_settled: waiting for a job (the
-- long-poll GET /v1/jobs/{id}?wait=, WaitJob) is woken by a NOTIFY on
-- pulse_jobs_settled from the statement that finished it, never by
-- polling. A control-api process holding at least one waiter keeps one
-- row here (refreshed while it waits, left to lapse after); a settling
-- statement notifies only while some row is live, one NOTIFY per 200
-- finished jobs, so with nobody waiting a settle pays one look at an
-- empty table.
--
-- The CHECKs are added NOT VALID (catalog only, under lock_timeout) and
-- validated by the next migration, as migrations/README.md asks.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs ADD COLUMN result bytea;
ALTER TABLE jobs ADD CONSTRAINT jobs_result_only_completed
    CHECK (result IS NULL OR status = 'COMPLETED') NOT VALID;
ALTER TABLE jobs ADD CONSTRAINT jobs_result_size
    CHECK (octet_length(result) <= 1048576) NOT VALID;

CREATE TABLE settle_listeners (
    process text PRIMARY KEY,
    until   timestamptz NOT NULL,
    CONSTRAINT settle_listeners_process_length CHECK (length(process) BETWEEN 1 AND 200)
);

-- +goose StatementBegin
CREATE FUNCTION pulse_notify_settled(ids uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(ids) > 0 AND EXISTS (SELECT 1 FROM settle_listeners WHERE until > now()) THEN
        PERFORM pg_notify('pulse_jobs_settled', string_agg(c.id::text, ','))
        FROM (SELECT u.id, (u.ord - 1) / 200 AS chunk
              FROM unnest(ids) WITH ORDINALITY AS u(id, ord)) AS c
        GROUP BY c.chunk;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION pulse_notify_settled(uuid[]);
DROP TABLE settle_listeners;
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs DROP CONSTRAINT jobs_result_size;
ALTER TABLE jobs DROP CONSTRAINT jobs_result_only_completed;
ALTER TABLE jobs DROP COLUMN result;
