-- An insert's wake says when its jobs are new (ADR-0055). A gateway whose
-- claim resumed after its cursor (ADR-0050) and took nothing looks before
-- the cursor at once only when something it was told of may sort there: a
-- released child, a retried or replaced job, freed room in a limited
-- topic. A job inserted by a transaction that began moments ago sorts
-- after every cursor (less ClaimSkewMargin, 25 ms), so the trigger marks
-- its topic's notification ' new' (a space, which no topic holds) when
-- the inserting statement runs within 10 ms of its transaction's start.
-- Jobs of an older transaction (a producer's own, with pulsetx) keep the
-- plain payload: they may sort before a cursor, and a gateway rescans for
-- them at once. Every other pulse_jobs_ready notification keeps its
-- payload as it is.

-- +goose Up
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pulse_jobs_ready', t.topic)
    FROM (SELECT DISTINCT topic FROM inserted_jobs
          WHERE status = 'PENDING' AND next_run_at <= now()) AS t;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
