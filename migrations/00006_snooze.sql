-- +goose Up
-- Snooze (ADR-0044): a handler may give its job back for a while without
-- spending an attempt. attempts stays the lease's fencing token (every
-- claim adds one, nothing takes one away), and snoozes counts the claims
-- that ended in a snooze: the attempts a job has spent are
-- attempts - snoozes, which max_attempts bounds. A snooze is
-- RUNNING -> PENDING with snoozes + 1 and attempts unchanged, settled by
-- the report statement under the lease holder's fence (status RUNNING,
-- locked_by, attempt), like every other outcome.
--
-- The column has a constant default (a catalog change, no rewrite); the
-- two CHECKs that bound attempts by max_attempts are replaced NOT VALID
-- (what they accept is a superset of the old rules on every existing row,
-- where snoozes is 0) and validated by the next migration.
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs
    ADD COLUMN snoozes integer NOT NULL DEFAULT 0,
    DROP CONSTRAINT jobs_attempts_within_max,
    ADD CONSTRAINT jobs_attempts_within_max
        CHECK (attempts >= 0 AND snoozes BETWEEN 0 AND attempts AND attempts - snoozes <= max_attempts) NOT VALID,
    DROP CONSTRAINT jobs_queued_has_attempts_left,
    ADD CONSTRAINT jobs_queued_has_attempts_left
        CHECK (status NOT IN ('PENDING', 'RETRYING') OR attempts - snoozes < max_attempts) NOT VALID;

-- The transition guard, with the snooze edge (RUNNING -> PENDING) and its
-- fence (jobs_snooze_fence).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_guard_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'COMPLETED' THEN
        RAISE EXCEPTION 'job % is COMPLETED, which is final', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_status_transition';
    END IF;

    IF NEW.status IS DISTINCT FROM OLD.status AND NOT (
           (OLD.status IN ('PENDING', 'RETRYING')         AND NEW.status = 'RUNNING')
        OR (OLD.status = 'RUNNING'                        AND NEW.status IN ('COMPLETED', 'RETRYING', 'DEAD_LETTERED'))
        OR (OLD.status IN ('PENDING', 'RETRYING', 'RUNNING') AND NEW.status = 'CANCELED')
        OR (OLD.status IN ('DEAD_LETTERED', 'CANCELED')   AND NEW.status = 'PENDING')
        OR (OLD.status = 'RUNNING'                        AND NEW.status = 'PENDING')
    ) THEN
        RAISE EXCEPTION 'illegal job transition % -> % for job %', OLD.status, NEW.status, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_status_transition';
    END IF;

    IF OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.status = OLD.status THEN
        RAISE EXCEPTION 'job % is %, which is frozen: it changes only by an operator retry to PENDING', OLD.id, OLD.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_terminal_frozen';
    END IF;

    -- attempts is the per-claim fencing token: it moves only by +1 inside a
    -- claim, or back to 0 when an operator grants a fresh budget on retry.
    IF NEW.attempts IS DISTINCT FROM OLD.attempts AND NOT (
           (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts = OLD.attempts + 1)
        OR (NEW.status = 'PENDING' AND OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.attempts = 0)
    ) THEN
        RAISE EXCEPTION 'illegal attempts change % -> % for job % (%)', OLD.attempts, NEW.attempts, OLD.id, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_attempts_fence';
    END IF;

    -- A claim must increment attempts; entering RUNNING any other way would
    -- reuse a fencing token.
    IF NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts IS DISTINCT FROM OLD.attempts + 1 THEN
        RAISE EXCEPTION 'claim of job % must increment attempts', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_attempts_fence';
    END IF;

    -- An operator retry grants a fresh budget: it keeps the error history
    -- and starts counting attempts again.
    IF OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.status = 'PENDING' AND NEW.attempts IS DISTINCT FROM 0 THEN
        RAISE EXCEPTION 'retry of job % must reset attempts to 0, not keep %', OLD.id, NEW.attempts
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_attempts_fence';
    END IF;

    -- snoozes counts the attempts that gave their lease back without
    -- spending a try (a snooze, RUNNING -> PENDING): it moves only by +1
    -- in a snooze, or back to 0 in an operator retry, and a RUNNING job
    -- goes back to PENDING only by a snooze. attempts does not move in a
    -- snooze (the rule above), so the next claim's token is new.
    IF NEW.snoozes IS DISTINCT FROM OLD.snoozes AND NOT (
           (OLD.status = 'RUNNING' AND NEW.status = 'PENDING' AND NEW.snoozes = OLD.snoozes + 1)
        OR (NEW.status = 'PENDING' AND OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.snoozes = 0)
    ) THEN
        RAISE EXCEPTION 'illegal snoozes change % -> % for job % (% -> %)', OLD.snoozes, NEW.snoozes, OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_snooze_fence', COLUMN = 'snoozes';
    END IF;
    IF OLD.status = 'RUNNING' AND NEW.status = 'PENDING' AND NEW.snoozes IS DISTINCT FROM OLD.snoozes + 1 THEN
        RAISE EXCEPTION 'job % goes back from RUNNING to PENDING only by a snooze, which counts one in snoozes', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_snooze_fence', COLUMN = 'snoozes';
    END IF;

    IF NEW.locked_by IS DISTINCT FROM OLD.locked_by AND NOT (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING') THEN
        RAISE EXCEPTION 'locked_by of job % changes only in a claim (% -> %, %)', OLD.id,
            coalesce(quote_literal(OLD.locked_by), 'NULL'), coalesce(quote_literal(NEW.locked_by), 'NULL'), NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_locked_by_claim_only', COLUMN = 'locked_by';
    END IF;

    IF NEW.started_at IS DISTINCT FROM OLD.started_at AND NEW.started_at > clock_timestamp() + interval '1 minute' THEN
        RAISE EXCEPTION 'started_at % of job % is in the future', NEW.started_at, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_timestamps_not_future', COLUMN = 'started_at';
    END IF;
    IF NEW.finished_at IS DISTINCT FROM OLD.finished_at AND NEW.finished_at > clock_timestamp() + interval '1 minute' THEN
        RAISE EXCEPTION 'finished_at % of job % is in the future', NEW.finished_at, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_timestamps_not_future', COLUMN = 'finished_at';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

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

-- +goose Down
-- Refused (jobs_attempts_within_max) while a snoozed job has made more
-- claims than its max_attempts: the old rules cannot describe it.
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
            OR (OLD.status IN ('DEAD_LETTERED', 'CANCELED')      AND NEW.status = 'PENDING')))
        OR (OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.status = OLD.status)
        OR (OLD.attempts IS DISTINCT FROM NEW.attempts AND NOT (
               (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts = OLD.attempts + 1)
            OR (NEW.status = 'PENDING' AND OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.attempts = 0)))
        OR (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts IS DISTINCT FROM OLD.attempts + 1)
        OR (OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.status = 'PENDING' AND NEW.attempts IS DISTINCT FROM 0)
        OR (OLD.locked_by IS DISTINCT FROM NEW.locked_by AND NOT (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING'))
        OR (OLD.started_at IS DISTINCT FROM NEW.started_at AND NEW.started_at > clock_timestamp() + interval '1 minute')
        OR (OLD.finished_at IS DISTINCT FROM NEW.finished_at AND NEW.finished_at > clock_timestamp() + interval '1 minute')
    )
    EXECUTE FUNCTION jobs_guard_transition();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_guard_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'COMPLETED' THEN
        RAISE EXCEPTION 'job % is COMPLETED, which is final', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_status_transition';
    END IF;

    IF NEW.status IS DISTINCT FROM OLD.status AND NOT (
           (OLD.status IN ('PENDING', 'RETRYING')         AND NEW.status = 'RUNNING')
        OR (OLD.status = 'RUNNING'                        AND NEW.status IN ('COMPLETED', 'RETRYING', 'DEAD_LETTERED'))
        OR (OLD.status IN ('PENDING', 'RETRYING', 'RUNNING') AND NEW.status = 'CANCELED')
        OR (OLD.status IN ('DEAD_LETTERED', 'CANCELED')   AND NEW.status = 'PENDING')
    ) THEN
        RAISE EXCEPTION 'illegal job transition % -> % for job %', OLD.status, NEW.status, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_status_transition';
    END IF;

    IF OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.status = OLD.status THEN
        RAISE EXCEPTION 'job % is %, which is frozen: it changes only by an operator retry to PENDING', OLD.id, OLD.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_terminal_frozen';
    END IF;

    -- attempts is the per-claim fencing token: it moves only by +1 inside a
    -- claim, or back to 0 when an operator grants a fresh budget on retry.
    IF NEW.attempts IS DISTINCT FROM OLD.attempts AND NOT (
           (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts = OLD.attempts + 1)
        OR (NEW.status = 'PENDING' AND OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.attempts = 0)
    ) THEN
        RAISE EXCEPTION 'illegal attempts change % -> % for job % (%)', OLD.attempts, NEW.attempts, OLD.id, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_attempts_fence';
    END IF;

    -- A claim must increment attempts; entering RUNNING any other way would
    -- reuse a fencing token.
    IF NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts IS DISTINCT FROM OLD.attempts + 1 THEN
        RAISE EXCEPTION 'claim of job % must increment attempts', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_attempts_fence';
    END IF;

    -- An operator retry grants a fresh budget: it keeps the error history
    -- and starts counting attempts again.
    IF OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.status = 'PENDING' AND NEW.attempts IS DISTINCT FROM 0 THEN
        RAISE EXCEPTION 'retry of job % must reset attempts to 0, not keep %', OLD.id, NEW.attempts
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_attempts_fence';
    END IF;

    IF NEW.locked_by IS DISTINCT FROM OLD.locked_by AND NOT (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING') THEN
        RAISE EXCEPTION 'locked_by of job % changes only in a claim (% -> %, %)', OLD.id,
            coalesce(quote_literal(OLD.locked_by), 'NULL'), coalesce(quote_literal(NEW.locked_by), 'NULL'), NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_locked_by_claim_only', COLUMN = 'locked_by';
    END IF;

    IF NEW.started_at IS DISTINCT FROM OLD.started_at AND NEW.started_at > clock_timestamp() + interval '1 minute' THEN
        RAISE EXCEPTION 'started_at % of job % is in the future', NEW.started_at, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_timestamps_not_future', COLUMN = 'started_at';
    END IF;
    IF NEW.finished_at IS DISTINCT FROM OLD.finished_at AND NEW.finished_at > clock_timestamp() + interval '1 minute' THEN
        RAISE EXCEPTION 'finished_at % of job % is in the future', NEW.finished_at, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_timestamps_not_future', COLUMN = 'finished_at';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

ALTER TABLE jobs
    DROP CONSTRAINT jobs_attempts_within_max,
    DROP CONSTRAINT jobs_queued_has_attempts_left,
    DROP COLUMN snoozes,
    ADD CONSTRAINT jobs_attempts_within_max CHECK (attempts BETWEEN 0 AND max_attempts),
    ADD CONSTRAINT jobs_queued_has_attempts_left
        CHECK (status NOT IN ('PENDING', 'RETRYING') OR attempts < max_attempts);
