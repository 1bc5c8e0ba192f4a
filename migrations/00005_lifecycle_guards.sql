-- +goose NO TRANSACTION
-- +goose Up
-- The schema guards a job's birth, life and death (ADR-0002, amended
-- 2026-11-23; docs/architecture.md, "The schema's rules"). 00001 guarded
-- the status edges and the attempts fence; this adds:
--
--   jobs_born_pending             an INSERT makes a PENDING job that has made no
--                                 attempt, holds no lease, names no worker, has not
--                                 started or finished and has an empty history
--   jobs_identity_immutable       id, topic, args, submitted_at, idempotency_key
--                                 and schedule_id never change
--   jobs_errors_append_only       the old error history is a prefix of the new one
--   jobs_terminal_frozen          a DEAD_LETTERED or CANCELED row changes only by
--                                 the operator retry that takes it back to PENDING
--                                 (COMPLETED stays final: jobs_status_transition)
--   jobs_attempts_fence           ... and that retry resets attempts to 0
--   jobs_locked_by_claim_only     locked_by changes only in a claim
--   jobs_timestamps_not_future    started_at and finished_at are never set more than
--                                 a minute ahead of the database's clock
--   jobs_delete_terminal_only     only a finished job may be deleted (DELETE and
--                                 TRUNCATE)
--   jobs_queued_has_attempts_left a PENDING or RETRYING job has attempts left, so
--                                 the claim can always take it (CHECK)
--   jobs_timestamps_finite        no timestamp is ±infinity (CHECK)
--   jobs_timestamps_ordered       started_at and finished_at are not before
--                                 submitted_at (CHECK)
--   jobs_locked_by_not_empty      locked_by is NULL or a worker id, never '' (CHECK)
--
-- Every refusal is SQLSTATE 23514 (check_violation) with the rule's name
-- as the constraint name. Rules about one row are CHECK constraints; rules
-- about a change (old row against new row, or the moment of writing) are
-- trigger WHEN clauses, plain expressions evaluated without entering
-- PL/pgSQL: legal inserts, claims, heartbeats, reports, reaps, cancels,
-- retries and deletes never call a trigger function. A function runs only
-- to refuse, with a message naming the job and the rule. The identity and
-- error-history triggers are column triggers (UPDATE OF), so a statement
-- that does not assign those columns (claim, heartbeat) does not even
-- evaluate their WHEN clause.
--
-- Outside a transaction, like 00004: the CHECKs are added NOT VALID, which
-- holds the ACCESS EXCLUSIVE lock only for a catalog change, and then
-- validated under a SHARE UPDATE EXCLUSIVE lock that lets claims, reports
-- and submits go on during the scan. Every statement can be re-run, so a
-- migration that failed part-way is finished by running it again.

-- Existing rows that the new CHECKs would refuse are repaired first, so the
-- migration cannot fail on a real database. None of these states can be
-- reached through pulse itself; they take a hand-written statement. A
-- healthy database pays one read-only scan. Otherwise, in one transaction
-- that holds back writes to jobs while it runs (the guard triggers are
-- disabled for that transaction only, as the repairs are moves the
-- lifecycle does not allow):
--
--  1. a PENDING or RETRYING job parked at next_run_at = 'infinity' (no claim
--     could ever take it) is CANCELED, with an error entry saying so; an
--     operator retry runs it;
--  2. a PENDING or RETRYING job with no attempts left (attempts =
--     max_attempts, which no claim can take: jobs_attempts_within_max) is
--     DEAD_LETTERED, with an error entry saying so; an operator retry gives
--     it a fresh budget;
--  3. any other ±infinity timestamp becomes the migration's time (a RUNNING
--     job's infinite lease thereby lapses, and the reaper retries it);
--  4. locked_by '' becomes NULL; on a RUNNING job, whose lease needs an
--     owner, it becomes 'unnamed-worker' and the lease lapses now, so the
--     reaper retries the job (no worker can report under '' any more);
--  5. a submitted_at later than the job's started_at or finished_at (or
--     infinite) moves back to the earliest of them.
--
-- Error entries have the shape the reaper writes: {attempt, error, worker,
-- at}. Down does not undo these repairs.
-- +goose StatementBegin
DO $repair$
DECLARE
    guard text;
    guards text[];
    n bigint;
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM jobs
        WHERE (status IN ('PENDING', 'RETRYING') AND attempts >= max_attempts)
           OR NOT isfinite(submitted_at) OR NOT isfinite(next_run_at)
           OR NOT isfinite(lease_until) OR NOT isfinite(started_at) OR NOT isfinite(finished_at)
           OR started_at < submitted_at OR finished_at < submitted_at
           OR locked_by = '')
    THEN
        RETURN;
    END IF;

    -- A re-run after a failure may meet this migration's own constraints
    -- and triggers; the repairs happen without them (they are added again
    -- below).
    ALTER TABLE jobs
        DROP CONSTRAINT IF EXISTS jobs_queued_has_attempts_left,
        DROP CONSTRAINT IF EXISTS jobs_timestamps_finite,
        DROP CONSTRAINT IF EXISTS jobs_timestamps_ordered,
        DROP CONSTRAINT IF EXISTS jobs_locked_by_not_empty;
    SELECT array_agg(tgname::text) INTO guards FROM pg_trigger
    WHERE tgrelid = 'jobs'::regclass AND NOT tgisinternal
      AND tgname IN ('jobs_guard_transition', 'jobs_guard_identity', 'jobs_guard_errors');
    FOREACH guard IN ARRAY coalesce(guards, '{}') LOOP
        EXECUTE format('ALTER TABLE jobs DISABLE TRIGGER %I', guard);
    END LOOP;

    UPDATE jobs
    SET status = 'CANCELED', finished_at = now(), next_run_at = now(),
        errors = errors || jsonb_build_array(jsonb_build_object(
            'attempt', attempts, 'worker', coalesce(locked_by, ''), 'at', now(),
            'error', 'migration 00005: next_run_at was infinity, so no claim could ever take this job; '
                     'canceled (retry it to run it)'))
    WHERE status IN ('PENDING', 'RETRYING') AND next_run_at = 'infinity';
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN RAISE NOTICE 'migration 00005: canceled % job(s) parked at next_run_at = infinity', n; END IF;

    UPDATE jobs
    SET status = 'DEAD_LETTERED', finished_at = now(),
        errors = errors || jsonb_build_array(jsonb_build_object(
            'attempt', attempts, 'worker', coalesce(locked_by, ''), 'at', now(),
            'error', format('migration 00005: %s with attempts %s of max_attempts %s has no attempt left, '
                            'so no claim could ever take it; dead-lettered (retry it for a fresh budget)',
                            status, attempts, max_attempts)))
    WHERE status IN ('PENDING', 'RETRYING') AND attempts >= max_attempts;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN RAISE NOTICE 'migration 00005: dead-lettered % queued job(s) without attempts left', n; END IF;

    UPDATE jobs
    SET next_run_at = CASE WHEN NOT isfinite(next_run_at) THEN now() ELSE next_run_at END,
        lease_until = CASE WHEN NOT isfinite(lease_until) THEN now() ELSE lease_until END,
        started_at  = CASE WHEN NOT isfinite(started_at)  THEN now() ELSE started_at END,
        finished_at = CASE WHEN NOT isfinite(finished_at) THEN now() ELSE finished_at END
    WHERE NOT isfinite(next_run_at) OR NOT isfinite(lease_until)
       OR NOT isfinite(started_at) OR NOT isfinite(finished_at);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN RAISE NOTICE 'migration 00005: replaced infinite timestamps of % job(s) with now()', n; END IF;

    UPDATE jobs
    SET locked_by   = CASE WHEN status = 'RUNNING' THEN 'unnamed-worker' END,
        lease_until = CASE WHEN status = 'RUNNING' THEN least(lease_until, now()) END
    WHERE locked_by = '';
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN RAISE NOTICE 'migration 00005: cleared locked_by '''' of % job(s)', n; END IF;

    UPDATE jobs
    SET submitted_at = least(CASE WHEN isfinite(submitted_at) THEN submitted_at ELSE now() END,
                             started_at, finished_at)
    WHERE NOT isfinite(submitted_at) OR started_at < submitted_at OR finished_at < submitted_at;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN RAISE NOTICE 'migration 00005: moved submitted_at back to the start or finish of % job(s)', n; END IF;

    FOREACH guard IN ARRAY coalesce(guards, '{}') LOOP
        EXECUTE format('ALTER TABLE jobs ENABLE TRIGGER %I', guard);
    END LOOP;
END
$repair$;
-- +goose StatementEnd

-- Row rules. Postgres evaluates every CHECK on every UPDATE of a job
-- (00004), so each is a handful of comparisons.
ALTER TABLE jobs
    DROP CONSTRAINT IF EXISTS jobs_queued_has_attempts_left,
    -- A job waiting for a claim always has an attempt left, so the claim
    -- (attempts + 1 <= max_attempts) can always move it: a failure on the
    -- last attempt dead-letters (report, reap), an operator retry resets
    -- attempts to 0, and max_attempts cannot be lowered to the attempts made.
    ADD CONSTRAINT jobs_queued_has_attempts_left
        CHECK (status NOT IN ('PENDING', 'RETRYING') OR attempts < max_attempts) NOT VALID,
    DROP CONSTRAINT IF EXISTS jobs_timestamps_finite,
    ADD CONSTRAINT jobs_timestamps_finite CHECK (
        isfinite(submitted_at) AND isfinite(next_run_at)
        AND (lease_until IS NULL OR isfinite(lease_until))
        AND (started_at IS NULL OR isfinite(started_at))
        AND (finished_at IS NULL OR isfinite(finished_at))) NOT VALID,
    DROP CONSTRAINT IF EXISTS jobs_timestamps_ordered,
    -- next_run_at may precede submitted_at: a schedule's job runs at its
    -- occurrence, and a submit may name a past run_at.
    ADD CONSTRAINT jobs_timestamps_ordered CHECK (
        (started_at IS NULL OR started_at >= submitted_at)
        AND (finished_at IS NULL OR finished_at >= submitted_at)) NOT VALID,
    DROP CONSTRAINT IF EXISTS jobs_locked_by_not_empty,
    ADD CONSTRAINT jobs_locked_by_not_empty CHECK (locked_by <> '') NOT VALID;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_guard_birth() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'job % must be born PENDING with attempts 0, no lease, no locked_by, no started_at or finished_at and an empty error history (got % with attempts %)',
        NEW.id, NEW.status, NEW.attempts
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_born_pending';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_guard_identity() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    col text;
BEGIN
    col := CASE
        WHEN NEW.id IS DISTINCT FROM OLD.id THEN 'id'
        WHEN NEW.topic IS DISTINCT FROM OLD.topic THEN 'topic'
        WHEN NEW.args::text IS DISTINCT FROM OLD.args::text THEN 'args'
        WHEN NEW.submitted_at IS DISTINCT FROM OLD.submitted_at THEN 'submitted_at'
        WHEN NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key THEN 'idempotency_key'
        WHEN NEW.schedule_id IS DISTINCT FROM OLD.schedule_id THEN 'schedule_id'
    END;
    IF col IS NULL THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'job identity is immutable: % of job % cannot change', col, OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable', COLUMN = col;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_guard_errors() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the error history of job % is append-only: the % entries it holds must stay, in order, at its start',
        OLD.id, jsonb_array_length(OLD.errors)
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_errors_append_only', COLUMN = 'errors';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_guard_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'job % is %: only a COMPLETED, DEAD_LETTERED or CANCELED job can be deleted (cancel it first)',
        OLD.id, OLD.status
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_delete_terminal_only';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_guard_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM jobs WHERE status IN ('PENDING', 'RUNNING', 'RETRYING')) THEN
        RAISE EXCEPTION 'TRUNCATE jobs would delete live jobs: only COMPLETED, DEAD_LETTERED or CANCELED jobs can be deleted (cancel them first)'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_delete_terminal_only';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- Birth: every INSERT pulse makes (submit, schedule fire) is this shape;
-- the WHEN clause is false for it and the function is never called.
CREATE OR REPLACE TRIGGER jobs_guard_birth
    BEFORE INSERT ON jobs
    FOR EACH ROW
    WHEN (
        NEW.status IS DISTINCT FROM 'PENDING'
        OR NEW.attempts IS DISTINCT FROM 0
        OR NEW.lease_until IS NOT NULL
        OR NEW.locked_by IS NOT NULL
        OR NEW.started_at IS NOT NULL
        OR NEW.finished_at IS NOT NULL
        OR NEW.errors IS DISTINCT FROM '[]'::jsonb
    )
    EXECUTE FUNCTION jobs_guard_birth();

-- Identity: a column trigger, so only a statement that assigns one of these
-- columns evaluates the WHEN clause (no pulse statement does). args is
-- compared as text: jsonb equality calls 1 and 1.0 equal, but a worker
-- would receive different bytes.
CREATE OR REPLACE TRIGGER jobs_guard_identity
    BEFORE UPDATE OF id, topic, args, submitted_at, idempotency_key, schedule_id ON jobs
    FOR EACH ROW
    WHEN (
        OLD.id IS DISTINCT FROM NEW.id
        OR OLD.topic IS DISTINCT FROM NEW.topic
        OR OLD.args::text IS DISTINCT FROM NEW.args::text
        OR OLD.submitted_at IS DISTINCT FROM NEW.submitted_at
        OR OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key
        OR OLD.schedule_id IS DISTINCT FROM NEW.schedule_id
    )
    EXECUTE FUNCTION jobs_guard_identity();

-- The error history only grows: reports and reaps assign errors, claims and
-- heartbeats do not (column trigger). The prefix test runs only when the
-- history changed, and a successful report leaves it as it was. The CASE
-- fixes the order: a non-array NEW (refused here too) never reaches
-- jsonb_array_length, and '$[0 to -1]' of an empty old history is [].
CREATE OR REPLACE TRIGGER jobs_guard_errors
    BEFORE UPDATE OF errors ON jobs
    FOR EACH ROW
    WHEN (
        OLD.errors IS DISTINCT FROM NEW.errors AND CASE
            WHEN NEW.errors IS NULL OR jsonb_typeof(NEW.errors) <> 'array' THEN true
            WHEN jsonb_array_length(NEW.errors) < jsonb_array_length(OLD.errors) THEN true
            ELSE jsonb_path_query_array(NEW.errors, '$[0 to $last]',
                     jsonb_build_object('last', jsonb_array_length(OLD.errors) - 1)) <> OLD.errors
        END
    )
    EXECUTE FUNCTION jobs_guard_errors();

-- Death: retention deletes only finished jobs (its WHERE says so too).
CREATE OR REPLACE TRIGGER jobs_guard_delete
    BEFORE DELETE ON jobs
    FOR EACH ROW
    WHEN (OLD.status NOT IN ('COMPLETED', 'DEAD_LETTERED', 'CANCELED'))
    EXECUTE FUNCTION jobs_guard_delete();

-- TRUNCATE fires no row trigger; this one refuses it while a live job
-- exists.
CREATE OR REPLACE TRIGGER jobs_guard_truncate
    BEFORE TRUNCATE ON jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_guard_truncate();

-- The transition guard of 00001, extended. Its checks, in the order they
-- refuse: COMPLETED is final; the status table; DEAD_LETTERED and CANCELED
-- are frozen but for the retry to PENDING; the attempts fence (a claim adds
-- one, a retry resets to 0, nothing else moves it); locked_by moves only in
-- a claim; started_at and finished_at not ahead of the clock. Identity moved
-- to jobs_guard_identity. The function returns NEW when it finds nothing
-- (the clock moved on between the WHEN clause and the function).
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

-- The WHEN clause is every rule above as one plain expression: a heartbeat
-- (only lease_until changes) and every legal claim, report, reap, cancel
-- and retry evaluate it to false. clock_timestamp() is read only when
-- started_at or finished_at changed; a CHECK may not read the clock at all.
CREATE OR REPLACE TRIGGER jobs_guard_transition
    BEFORE UPDATE ON jobs
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

ALTER TABLE jobs VALIDATE CONSTRAINT jobs_queued_has_attempts_left;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_timestamps_finite;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_timestamps_ordered;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_locked_by_not_empty;

-- +goose Down
-- 00001's transition guard comes back first (it checks id and submitted_at
-- itself), then the rest goes. The repairs of Up stay.
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
    IF NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts <> OLD.attempts + 1 THEN
        RAISE EXCEPTION 'claim of job % must increment attempts', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_attempts_fence';
    END IF;

    IF NEW.id <> OLD.id OR NEW.submitted_at <> OLD.submitted_at THEN
        RAISE EXCEPTION 'job identity is immutable (job %)', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE OR REPLACE TRIGGER jobs_guard_transition
    BEFORE UPDATE ON jobs
    FOR EACH ROW
    WHEN (
        OLD.status = 'COMPLETED'
        OR OLD.id IS DISTINCT FROM NEW.id
        OR OLD.submitted_at IS DISTINCT FROM NEW.submitted_at
        OR (OLD.status IS DISTINCT FROM NEW.status AND NOT (
               (OLD.status IN ('PENDING', 'RETRYING')            AND NEW.status = 'RUNNING')
            OR (OLD.status = 'RUNNING'                           AND NEW.status IN ('COMPLETED', 'RETRYING', 'DEAD_LETTERED'))
            OR (OLD.status IN ('PENDING', 'RETRYING', 'RUNNING') AND NEW.status = 'CANCELED')
            OR (OLD.status IN ('DEAD_LETTERED', 'CANCELED')      AND NEW.status = 'PENDING')))
        OR (OLD.attempts IS DISTINCT FROM NEW.attempts AND NOT (
               (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts = OLD.attempts + 1)
            OR (NEW.status = 'PENDING' AND OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.attempts = 0)))
        OR (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING' AND NEW.attempts IS DISTINCT FROM OLD.attempts + 1)
    )
    EXECUTE FUNCTION jobs_guard_transition();

DROP TRIGGER IF EXISTS jobs_guard_truncate ON jobs;
DROP TRIGGER IF EXISTS jobs_guard_delete ON jobs;
DROP TRIGGER IF EXISTS jobs_guard_errors ON jobs;
DROP TRIGGER IF EXISTS jobs_guard_identity ON jobs;
DROP TRIGGER IF EXISTS jobs_guard_birth ON jobs;
DROP FUNCTION IF EXISTS jobs_guard_truncate();
DROP FUNCTION IF EXISTS jobs_guard_delete();
DROP FUNCTION IF EXISTS jobs_guard_errors();
DROP FUNCTION IF EXISTS jobs_guard_identity();
DROP FUNCTION IF EXISTS jobs_guard_birth();

ALTER TABLE jobs
    DROP CONSTRAINT IF EXISTS jobs_locked_by_not_empty,
    DROP CONSTRAINT IF EXISTS jobs_timestamps_ordered,
    DROP CONSTRAINT IF EXISTS jobs_timestamps_finite,
    DROP CONSTRAINT IF EXISTS jobs_queued_has_attempts_left;
