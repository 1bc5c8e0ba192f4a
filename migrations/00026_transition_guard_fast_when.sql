-- The transition guard's WHEN clause becomes a short test of what is
-- legal (ADR-0071). Postgres prepares a row trigger's WHEN clause afresh
-- for every statement that updates a row: it rebuilds the expression from
-- its stored node tree and compiles it. The clause 00006 wrote spelled out
-- every illegal change (its node tree 23 kB, the largest in the schema),
-- and preparing it cost a one-row claim or report about as much as the
-- rest of the UPDATE: 140-170 us of a 230-250 us statement, measured in a
-- loop of single-row claims and settles.
--
-- The new clause says which changes are certainly legal: an operator's
-- retry, a claim, and the changes a live job goes through (a settle, a
-- snooze, a lapsed lease, a cancel, a heartbeat, progress), each with the
-- fences it must keep. Whatever it cannot call legal (false or NULL: IS
-- NOT TRUE) runs the function, which holds every rule and raises the same
-- errors as before, and returns without raising for a legal change it was
-- not needed for. The function is unchanged. Everything the old clause
-- called illegal the new one sends to the function
-- (TestTransitionGuardWhenHidesNoIllegalUpdate compares the two on a
-- matrix of updates), and the paths pulse itself takes still call no
-- PL/pgSQL (TestSchemaLegalPathsNeverEnterPLpgSQL).

-- +goose Up
SET LOCAL lock_timeout = '500ms';

CREATE OR REPLACE TRIGGER jobs_guard_transition
    AFTER UPDATE ON jobs
    FOR EACH ROW
    WHEN ((
        OLD.status <> 'COMPLETED'
        AND CASE
            -- an operator's retry: a fresh budget, nothing else
            WHEN OLD.status IN ('DEAD_LETTERED', 'CANCELED') THEN
                NEW.status = 'PENDING' AND NEW.attempts = 0 AND NEW.snoozes = 0
                AND NEW.locked_by IS NOT DISTINCT FROM OLD.locked_by
            -- a claim: the next fencing token
            WHEN NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' THEN
                NEW.attempts = OLD.attempts + 1 AND NEW.snoozes = OLD.snoozes
            -- what else a live job goes through: the same fence, snoozes
            -- one up only in a snooze, and only the edges to CANCELED and
            -- out of RUNNING
            ELSE
                NEW.attempts = OLD.attempts
                AND NEW.locked_by IS NOT DISTINCT FROM OLD.locked_by
                AND NEW.snoozes = OLD.snoozes + (OLD.status = 'RUNNING' AND NEW.status = 'PENDING')::int
                AND (NEW.status IN (OLD.status, 'CANCELED')
                     OR (OLD.status = 'RUNNING' AND NEW.status IN ('COMPLETED', 'RETRYING', 'DEAD_LETTERED', 'PENDING')))
            END
        -- no time set more than a minute ahead (NULL: none set)
        AND coalesce(NEW.started_at <= clock_timestamp() + interval '1 minute', true)
        AND coalesce(NEW.finished_at <= clock_timestamp() + interval '1 minute', true)
    ) IS NOT TRUE)
    EXECUTE FUNCTION jobs_guard_transition();

-- +goose Down
SET LOCAL lock_timeout = '500ms';

CREATE OR REPLACE TRIGGER jobs_guard_transition
    AFTER UPDATE ON jobs
    FOR EACH ROW
    WHEN (
        OLD.status = 'COMPLETED'
        OR (OLD.status IS DISTINCT FROM NEW.status AND NOT (
               (OLD.status IN ('PENDING', 'RETRYING')            AND NEW.status = 'RUNNING')
            OR (OLD.status = 'RUNNING'                           AND NEW.status IN ('COMPLETED', 'RETRYING', 'DEAD_LETTERED'))
            OR (OLD.status IN ('PENDING', 'RETRYING', 'RUNNING') AND NEW.status = 'CANCELED')
            OR (OLD.status IN ('DEAD_LETTERED', 'CANCELED')      AND NEW.status = 'PENDING')
            OR (OLD.status = 'RUNNING'                           AND NEW.status = 'PENDING')))
        OR (OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.status = OLD.status)
        OR (OLD.attempts IS DISTINCT FROM NEW.attempts AND NOT (
               (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts = OLD.attempts + 1)
            OR (NEW.status = 'PENDING' AND OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.attempts = 0)))
        OR (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts IS DISTINCT FROM OLD.attempts + 1)
        OR (OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.status = 'PENDING' AND NEW.attempts IS DISTINCT FROM 0)
        OR (OLD.snoozes IS DISTINCT FROM NEW.snoozes AND NOT (
               (OLD.status = 'RUNNING' AND NEW.status = 'PENDING' AND NEW.snoozes = OLD.snoozes + 1)
            OR (NEW.status = 'PENDING' AND OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.snoozes = 0)))
        OR (OLD.status = 'RUNNING' AND NEW.status = 'PENDING' AND NEW.snoozes IS DISTINCT FROM OLD.snoozes + 1)
        OR (OLD.locked_by IS DISTINCT FROM NEW.locked_by AND NOT (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING'))
        OR (OLD.started_at IS DISTINCT FROM NEW.started_at AND NEW.started_at > clock_timestamp() + interval '1 minute')
        OR (OLD.finished_at IS DISTINCT FROM NEW.finished_at AND NEW.finished_at > clock_timestamp() + interval '1 minute')
    )
    EXECUTE FUNCTION jobs_guard_transition();
