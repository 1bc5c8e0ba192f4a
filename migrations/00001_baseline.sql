-- +goose Up
-- The whole pulse schema, in one migration: what 00001_jobs.sql through
-- 00014_audit_retention.sql built, folded into one file before the
-- first release. It produces exactly the schema those fourteen
-- produced (migrations/schema.sql is that schema as pg_dump prints it, and
-- a test keeps the two equal). Each section names the migration it was
-- folded from, so "migration 00007" in a comment elsewhere still says where
-- a rule came from; the history of each rule is in docs/adr/ and in git.
--
-- It runs in one transaction on an empty database, so it takes no care
-- about locks: nothing else uses the tables yet. Every later migration
-- runs against a live, busy jobs table and follows the rules in
-- migrations/README.md.
--
-- Contents:
--   jobs                the queue; every transition guarded (00001, 00005,
--                       00008, 00010, 00012, 00013)
--   job_uniques         "unique for a period" keys (00008)
--   dispatch_control,   pause and resume, and its audit log (00002, 00014)
--   control_events
--   schedules           At / Every / Cron schedules (00003, 00008)
--   worker_presence,    the connected workers (00006)
--   worker_topic_seen
--   retry_policy        the fleet's retry backoff, one row (00007, 00010)
--   topic_limits        a topic's fleet-wide max_running (00009)
--   job_throughput      attempts settled per minute (00011)

-- ---------------------------------------------------------------------------
-- jobs (00001): the queue.
--
-- Every change to a job is checked by the schema, so no service bug and no
-- hand-typed UPDATE can move a job along an edge outside the transition
-- table (ADR-0002):
--   PENDING, RETRYING -> RUNNING; RUNNING -> COMPLETED, RETRYING, DEAD_LETTERED;
--   PENDING, RETRYING, RUNNING -> CANCELED; DEAD_LETTERED, CANCELED -> PENDING.
--
-- The rules, each refused with SQLSTATE 23514 (check_violation) and the
-- rule's name as the constraint name:
--
--   jobs_status_transition        the edges above; COMPLETED is final
--   jobs_attempts_fence           attempts moves only by +1 in a claim, or back
--                                 to 0 in an operator retry (it is the claim's
--                                 fencing token)
--   jobs_born_pending             an INSERT makes a PENDING job that has made no
--                                 attempt, holds no lease, names no worker, has not
--                                 started or finished and has an empty history
--   jobs_identity_immutable       id, topic, args, submitted_at, idempotency_key,
--                                 schedule_id, retry_base, retry_max, retry_fixed
--                                 and timeout never change
--   jobs_errors_append_only       the old error history is a prefix of the new one
--   jobs_terminal_frozen          a DEAD_LETTERED or CANCELED row changes only by
--                                 the operator retry that takes it back to PENDING
--   jobs_locked_by_claim_only     locked_by changes only in a claim
--   jobs_timestamps_not_future    started_at and finished_at are never set more than
--                                 a minute ahead of the database's clock
--   jobs_delete_terminal_only     only a finished job may be deleted (DELETE and
--                                 TRUNCATE)
--   jobs_args_object, jobs_idempotency_key_length, jobs_retry_form,
--   jobs_retry_range, jobs_timeout_range, jobs_topic_format
--                                 the shape of what a producer submitted, checked
--                                 at birth (jobs_guard_spec)
--   and the CHECK constraints in the table below.
--
-- Where each rule is checked is chosen for the claim and the report, which
-- update every job twice (ADR-0010, ADR-0020):
--  - Postgres evaluates every CHECK of a row on every UPDATE, whether or not
--    its columns changed; so only rules on columns an UPDATE may change are
--    CHECKs, each a handful of comparisons. Rules on columns no UPDATE can
--    change (identity) are checked once, at birth, by jobs_guard_spec.
--  - Rules about a change (old row against new row) are trigger WHEN
--    clauses, plain expressions evaluated without entering PL/pgSQL: legal
--    inserts, claims, heartbeats, reports, reaps, cancels, retries and
--    deletes never call a trigger function. A function runs only to refuse,
--    with a message naming the job and the rule.
--  - The UPDATE and DELETE guards run AFTER, not BEFORE: any BEFORE row
--    trigger makes Postgres lock each row before updating it (a Heap/LOCK
--    WAL record per row). An AFTER trigger's WHEN clause is evaluated as
--    the row is written and queues nothing when false; when true, its
--    function raises at the end of the statement, which then writes
--    nothing.
--  - The identity and error-history guards are column triggers (UPDATE OF),
--    so a statement that assigns none of those columns (claim, heartbeat)
--    does not even evaluate their WHEN clause.

-- +goose StatementBegin
CREATE FUNCTION pulse_is_terminal(status text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT status IN ('COMPLETED', 'DEAD_LETTERED', 'CANCELED')
$$;
-- +goose StatementEnd

CREATE TABLE jobs (
    id              uuid        PRIMARY KEY,
    topic           text        NOT NULL,
    args            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    priority        smallint    NOT NULL DEFAULT 5,
    status          text        NOT NULL DEFAULT 'PENDING',
    attempts        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL DEFAULT 25,
    errors          jsonb       NOT NULL DEFAULT '[]'::jsonb,
    locked_by       text,
    lease_until     timestamptz,
    next_run_at     timestamptz NOT NULL DEFAULT now(),
    submitted_at    timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    schedule_id     uuid,
    idempotency_key text,
    traceparent     text,
    tracestate      text,
    -- How long one attempt may run, 1s..24h (00008). The worker's SDK gives
    -- the handler a context with that deadline and fails an attempt that
    -- overruns it, which then follows the retry policy like any failure.
    -- NULL: no timeout (the worker's per-topic default, if any). The lease
    -- and the reaper stay the backstop for a worker that dies.
    timeout         interval,
    -- The job's own retry policy (00010, ADR-0018), in exactly one form:
    -- exponential (retry_base, optionally retry_max) or fixed
    -- (retry_fixed); none of them: the retry_policy row. See
    -- pulse_retry_delay below.
    retry_base      interval,
    retry_max       interval,
    retry_fixed     interval,

    CONSTRAINT jobs_status_known CHECK (status IN
        ('PENDING', 'RUNNING', 'RETRYING', 'COMPLETED', 'DEAD_LETTERED', 'CANCELED')),
    -- priority and max_attempts may change after submit (an operator
    -- reprioritizes a waiting job or raises its budget), so they stay
    -- CHECKs: two integer comparisons each.
    CONSTRAINT jobs_priority_range CHECK (priority BETWEEN 0 AND 10),
    CONSTRAINT jobs_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 100),
    CONSTRAINT jobs_attempts_within_max CHECK (attempts BETWEEN 0 AND max_attempts),
    CONSTRAINT jobs_errors_array CHECK (jsonb_typeof(errors) = 'array'),
    -- A RUNNING row always carries its lease; no other row does.
    CONSTRAINT jobs_running_is_leased CHECK (
        (status = 'RUNNING') = (lease_until IS NOT NULL)
        AND (status <> 'RUNNING' OR (locked_by IS NOT NULL AND started_at IS NOT NULL))),
    -- Terminal rows say when they ended; live rows have not ended.
    CONSTRAINT jobs_finished_iff_terminal CHECK (pulse_is_terminal(status) = (finished_at IS NOT NULL)),
    -- A job waiting for a claim always has an attempt left, so the claim
    -- (attempts + 1 <= max_attempts) can always move it: a failure on the
    -- last attempt dead-letters (report, reap), an operator retry resets
    -- attempts to 0, and max_attempts cannot be lowered to the attempts made
    -- (00005).
    CONSTRAINT jobs_queued_has_attempts_left
        CHECK (status NOT IN ('PENDING', 'RETRYING') OR attempts < max_attempts),
    CONSTRAINT jobs_timestamps_finite CHECK (
        isfinite(submitted_at) AND isfinite(next_run_at)
        AND (lease_until IS NULL OR isfinite(lease_until))
        AND (started_at IS NULL OR isfinite(started_at))
        AND (finished_at IS NULL OR isfinite(finished_at))),
    -- next_run_at may precede submitted_at: a schedule's job runs at its
    -- occurrence, and a submit may name a past run_at.
    CONSTRAINT jobs_timestamps_ordered CHECK (
        (started_at IS NULL OR started_at >= submitted_at)
        AND (finished_at IS NULL OR finished_at >= submitted_at)),
    -- locked_by is NULL or a worker id, never ''.
    CONSTRAINT jobs_locked_by_not_empty CHECK (locked_by <> '')
);

-- The claim walks this index in dispatch order and stops after LIMIT rows,
-- so a claim costs the same at any backlog depth.
CREATE INDEX jobs_claim_idx ON jobs (priority DESC, submitted_at, id)
    WHERE status IN ('PENDING', 'RETRYING');

-- The reaper's sweep reads only RUNNING rows, oldest lease first.
CREATE INDEX jobs_expired_lease_idx ON jobs (lease_until)
    WHERE status = 'RUNNING';

-- Idempotent submit: a key is unique among live jobs only, so a key can be
-- reused once its job has finished.
CREATE UNIQUE INDEX jobs_idempotency_key_live_idx ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('PENDING', 'RUNNING', 'RETRYING');

-- Retention and "finished since" queries.
CREATE INDEX jobs_finished_idx ON jobs (finished_at)
    WHERE finished_at IS NOT NULL;

-- A schedule's fire history, newest first (00003).
CREATE INDEX jobs_schedule_idx ON jobs (schedule_id, submitted_at DESC, id) WHERE schedule_id IS NOT NULL;

-- Dead-lettered jobs per topic (ListTopics, the dashboard) without reading
-- every finished job retention keeps (00009). Cheap to keep: a row enters
-- it once, when it dead-letters; no claim, heartbeat or report of a live
-- job writes to it.
CREATE INDEX jobs_dead_lettered_topic_idx ON jobs (topic) WHERE status = 'DEAD_LETTERED';

-- +goose StatementBegin
-- Birth (00005): every INSERT pulse makes (submit, schedule fire) has the
-- shape the trigger's WHEN clause accepts, so this function never runs but
-- to refuse.
CREATE FUNCTION jobs_guard_birth() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'job % must be born PENDING with attempts 0, no lease, no locked_by, no started_at or finished_at and an empty error history (got % with attempts %)',
        NEW.id, NEW.status, NEW.attempts
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_born_pending';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_birth
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

-- The shape of what a producer submitted (00013, ADR-0020): six rules that
-- were CHECK constraints until no UPDATE could change their columns
-- (jobs_guard_identity). The WHEN clause is true only when one of the six
-- expressions is FALSE (a CHECK passes on NULL, hence IS FALSE), and the
-- function raises what Postgres raises for a CHECK: SQLSTATE 23514, the
-- rule's name as the constraint, the table, and 'new row for relation
-- "jobs" violates check constraint "..."', naming the first broken rule in
-- name order. A legal insert evaluates the WHEN clause only.
-- +goose StatementBegin
CREATE FUNCTION jobs_guard_spec() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    rule text;
BEGIN
    -- The WHEN clause's expressions, in name order: the first broken one
    -- is the constraint Postgres would have named.
    rule := CASE
        WHEN (jsonb_typeof(NEW.args) = 'object') IS FALSE THEN 'jobs_args_object'
        WHEN (NEW.idempotency_key IS NULL OR length(NEW.idempotency_key) BETWEEN 1 AND 255) IS FALSE
            THEN 'jobs_idempotency_key_length'
        WHEN ((NEW.retry_base IS NULL AND NEW.retry_max IS NULL)
              OR (NEW.retry_fixed IS NULL AND NEW.retry_base IS NOT NULL
                  AND (NEW.retry_max IS NULL OR NEW.retry_max >= NEW.retry_base))) IS FALSE
            THEN 'jobs_retry_form'
        WHEN ((NEW.retry_base IS NULL OR (NEW.retry_base >= interval '1 millisecond' AND NEW.retry_base <= interval '366 days'))
              AND (NEW.retry_max IS NULL OR (NEW.retry_max >= interval '1 millisecond' AND NEW.retry_max <= interval '366 days'))
              AND (NEW.retry_fixed IS NULL OR (NEW.retry_fixed >= interval '1 millisecond' AND NEW.retry_fixed <= interval '366 days'))) IS FALSE
            THEN 'jobs_retry_range'
        WHEN (NEW.timeout IS NULL OR (NEW.timeout >= interval '1 second' AND NEW.timeout <= interval '24 hours')) IS FALSE
            THEN 'jobs_timeout_range'
        WHEN (length(NEW.topic) <= 128 AND NEW.topic ~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$') IS FALSE
            THEN 'jobs_topic_format'
    END;
    IF rule IS NULL THEN
        -- Only if this CASE and the WHEN clause disagree.
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"', TG_TABLE_NAME, rule
        USING ERRCODE = 'check_violation', CONSTRAINT = rule, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
END
$$;
-- +goose StatementEnd

-- Named after jobs_guard_birth, so it runs after it (BEFORE triggers run
-- in name order): a row breaking both names jobs_born_pending. The topic
-- regex is written `[...]*` plus a length bound, not `[...]{0,127}`, which
-- accepts the same strings at a fortieth of the cost (00004).
CREATE TRIGGER jobs_guard_spec
    BEFORE INSERT ON jobs
    FOR EACH ROW
    WHEN (
        (jsonb_typeof(NEW.args) = 'object') IS FALSE
        OR (NEW.idempotency_key IS NULL OR length(NEW.idempotency_key) BETWEEN 1 AND 255) IS FALSE
        OR ((NEW.retry_base IS NULL AND NEW.retry_max IS NULL)
            OR (NEW.retry_fixed IS NULL AND NEW.retry_base IS NOT NULL
                AND (NEW.retry_max IS NULL OR NEW.retry_max >= NEW.retry_base))) IS FALSE
        OR ((NEW.retry_base IS NULL OR (NEW.retry_base >= interval '1 millisecond' AND NEW.retry_base <= interval '366 days'))
            AND (NEW.retry_max IS NULL OR (NEW.retry_max >= interval '1 millisecond' AND NEW.retry_max <= interval '366 days'))
            AND (NEW.retry_fixed IS NULL OR (NEW.retry_fixed >= interval '1 millisecond' AND NEW.retry_fixed <= interval '366 days'))) IS FALSE
        OR (NEW.timeout IS NULL OR (NEW.timeout >= interval '1 second' AND NEW.timeout <= interval '24 hours')) IS FALSE
        OR (length(NEW.topic) <= 128 AND NEW.topic ~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$') IS FALSE
    )
    EXECUTE FUNCTION jobs_guard_spec();

-- The transition guard (00001, extended by 00005). Its checks, in the
-- order they refuse: COMPLETED is final; the status table; DEAD_LETTERED
-- and CANCELED are frozen but for the retry to PENDING; the attempts fence
-- (a claim adds one, a retry resets to 0, nothing else moves it); locked_by
-- moves only in a claim; started_at and finished_at not ahead of the
-- clock. The function returns NEW when it finds nothing (the clock moved
-- on between the WHEN clause and the function).
-- +goose StatementBegin
CREATE FUNCTION jobs_guard_transition() RETURNS trigger
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
CREATE TRIGGER jobs_guard_transition
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

-- Identity (00005, 00010, 00012): what a producer submitted never changes.
-- args is compared as text: jsonb equality calls 1 and 1.0 equal, but a
-- worker would receive different bytes.
-- +goose StatementBegin
CREATE FUNCTION jobs_guard_identity() RETURNS trigger
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
        WHEN NEW.retry_base IS DISTINCT FROM OLD.retry_base THEN 'retry_base'
        WHEN NEW.retry_max IS DISTINCT FROM OLD.retry_max THEN 'retry_max'
        WHEN NEW.retry_fixed IS DISTINCT FROM OLD.retry_fixed THEN 'retry_fixed'
        WHEN NEW.timeout IS DISTINCT FROM OLD.timeout THEN 'timeout'
    END;
    IF col IS NULL THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'job identity is immutable: % of job % cannot change', col, OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable', COLUMN = col;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_identity
    AFTER UPDATE OF id, topic, args, submitted_at, idempotency_key, schedule_id,
                    retry_base, retry_max, retry_fixed, timeout ON jobs
    FOR EACH ROW
    WHEN (
        OLD.id IS DISTINCT FROM NEW.id
        OR OLD.topic IS DISTINCT FROM NEW.topic
        OR OLD.args::text IS DISTINCT FROM NEW.args::text
        OR OLD.submitted_at IS DISTINCT FROM NEW.submitted_at
        OR OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key
        OR OLD.schedule_id IS DISTINCT FROM NEW.schedule_id
        OR OLD.retry_base IS DISTINCT FROM NEW.retry_base
        OR OLD.retry_max IS DISTINCT FROM NEW.retry_max
        OR OLD.retry_fixed IS DISTINCT FROM NEW.retry_fixed
        OR OLD.timeout IS DISTINCT FROM NEW.timeout
    )
    EXECUTE FUNCTION jobs_guard_identity();

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_errors() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the error history of job % is append-only: the % entries it holds must stay, in order, at its start',
        OLD.id, jsonb_array_length(OLD.errors)
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_errors_append_only', COLUMN = 'errors';
END
$$;
-- +goose StatementEnd

-- The error history only grows (00005): reports and reaps assign errors,
-- claims and heartbeats do not (column trigger). The prefix test runs only
-- when the history changed, and a successful report leaves it as it was.
-- The CASE fixes the order: a non-array NEW (refused here too) never
-- reaches jsonb_array_length, and '$[0 to -1]' of an empty old history is
-- [].
CREATE TRIGGER jobs_guard_errors
    AFTER UPDATE OF errors ON jobs
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

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'job % is %: only a COMPLETED, DEAD_LETTERED or CANCELED job can be deleted (cancel it first)',
        OLD.id, OLD.status
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_delete_terminal_only';
END
$$;
-- +goose StatementEnd

-- Death (00005): retention deletes only finished jobs (its WHERE says so
-- too).
CREATE TRIGGER jobs_guard_delete
    AFTER DELETE ON jobs
    FOR EACH ROW
    WHEN (OLD.status NOT IN ('COMPLETED', 'DEAD_LETTERED', 'CANCELED'))
    EXECUTE FUNCTION jobs_guard_delete();

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_truncate() RETURNS trigger
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

-- TRUNCATE fires no row trigger; this one refuses it while a live job
-- exists. Because job_uniques references jobs, TRUNCATE jobs must name it
-- too (TRUNCATE jobs, job_uniques) or say CASCADE.
CREATE TRIGGER jobs_guard_truncate
    BEFORE TRUNCATE ON jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_guard_truncate();

-- +goose StatementBegin
-- One NOTIFY per distinct topic per INSERT statement, so a 1,000-row batch
-- insert wakes the gateways once, not 1,000 times.
CREATE FUNCTION jobs_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pulse_jobs_ready', t.topic)
    FROM (SELECT DISTINCT topic FROM inserted_jobs
          WHERE status = 'PENDING' AND next_run_at <= now()) AS t;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_notify_insert
    AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_notify_insert();

-- ---------------------------------------------------------------------------
-- job_uniques (00008): "unique for a period". At most one job per topic and
-- args (compared as jsonb's canonical text) per period, whatever that job's
-- status. One row per key: the job holding it and when the period ends. The
-- primary key is the rule: a submit claims the key in the same statement
-- that inserts the job (INSERT ... ON CONFLICT (unique_key) DO UPDATE ...
-- WHERE the period has ended), so two racing submits cannot both hold it; a
-- submit that finds the key held returns the holder as a duplicate. An
-- expired row is replaced by the next submit of the key, never deleted on
-- its own. The holder must exist (foreign key, checked at the end of the
-- statement that claims the key), and when retention deletes the job its
-- key goes with it (ON DELETE CASCADE): the period ends early then.
--
-- The key is md5(topic || E'\n' || args::text) as a uuid; a topic never
-- holds a newline, so the pair is unambiguous. jsonb's text is canonical
-- (key order, whitespace and duplicate keys do not matter) but numbers keep
-- their spelling: {"n": 1} and {"n": 1.0} are different args.
CREATE TABLE job_uniques (
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
CREATE INDEX job_uniques_job_id_idx ON job_uniques (job_id);

-- ---------------------------------------------------------------------------
-- dispatch_control, control_events (00002): pause and resume dispatch
-- (docs/pause.md, ADR-0007). One row per pause scope: '*' is the global
-- scope, any other scope is a topic. The claim statement reads this table,
-- so a committed pause stops every gateway's claims at once; gateways also
-- keep an in-memory copy (the gate) refreshed by NOTIFY and polling.

-- Every change to dispatch_control draws its version from this sequence
-- (trigger below), so a version names one change and never repeats; the
-- state's version is the largest row version.
CREATE SEQUENCE dispatch_control_version;

CREATE TABLE dispatch_control (
    scope      text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    mode       text        NOT NULL DEFAULT 'drain',
    reason     text        NOT NULL DEFAULT '',
    -- Who made the latest change (the authenticated identity, or 'system'
    -- for an automatic resume).
    actor      text        NOT NULL DEFAULT '',
    -- When the scope was last paused; kept on resume so status can say
    -- "last paused at".
    paused_at  timestamptz,
    -- The pause resumes by itself at this time (control-api's sweeper).
    until      timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    version    bigint      NOT NULL DEFAULT 0,

    CONSTRAINT dispatch_control_scope_format CHECK (
        scope = '*' OR scope ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    CONSTRAINT dispatch_control_mode_known CHECK (mode IN ('drain', 'quiesce')),
    CONSTRAINT dispatch_control_reason_length CHECK (char_length(reason) <= 500),
    -- A paused scope always says why and since when; a dispatching one
    -- carries no stale reason and no expiry.
    CONSTRAINT dispatch_control_paused_explained CHECK (
        (paused AND reason <> '' AND paused_at IS NOT NULL)
        OR (NOT paused AND reason = '' AND until IS NULL))
);

-- The claim reads the paused scopes through this index. It matters beyond
-- speed: the claim runs with seq scans disabled (jobstore/queue_head.go),
-- and a disabled seq scan on this table would add enable_seqscan's huge
-- penalty to the claim's cost, which would push it over jit_above_cost and
-- spend hundreds of milliseconds compiling every claim.
CREATE INDEX dispatch_control_paused_idx ON dispatch_control (scope) WHERE paused;

-- +goose StatementBegin
CREATE FUNCTION dispatch_control_stamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := nextval('dispatch_control_version');
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- Even a hand-typed UPDATE in psql gets a new version and wakes the
-- gateways.
CREATE TRIGGER dispatch_control_stamp
    BEFORE INSERT OR UPDATE ON dispatch_control
    FOR EACH ROW
    EXECUTE FUNCTION dispatch_control_stamp();

-- +goose StatementBegin
CREATE FUNCTION dispatch_control_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pulse_dispatch_control', COALESCE(max(version), 0)::text) FROM changed_scopes;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER dispatch_control_notify_insert
    AFTER INSERT ON dispatch_control
    REFERENCING NEW TABLE AS changed_scopes
    FOR EACH STATEMENT
    EXECUTE FUNCTION dispatch_control_notify();

CREATE TRIGGER dispatch_control_notify_update
    AFTER UPDATE ON dispatch_control
    REFERENCING NEW TABLE AS changed_scopes
    FOR EACH STATEMENT
    EXECUTE FUNCTION dispatch_control_notify();

-- A fresh deployment dispatches.
INSERT INTO dispatch_control (scope) VALUES ('*');

-- The append-only audit of every pause and resume.
CREATE TABLE control_events (
    id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope   text        NOT NULL,
    action  text        NOT NULL,
    -- The mode paused with, or the mode a resume lifted.
    mode    text        NOT NULL,
    reason  text        NOT NULL DEFAULT '',
    actor   text        NOT NULL,
    at      timestamptz NOT NULL DEFAULT now(),
    until   timestamptz,
    -- dispatch_control.version after the change.
    version bigint      NOT NULL,

    CONSTRAINT control_events_action_known CHECK (action IN ('pause', 'resume')),
    CONSTRAINT control_events_mode_known CHECK (mode IN ('drain', 'quiesce')),
    CONSTRAINT control_events_actor_present CHECK (actor <> '')
);

-- The audit stays append-only, but need not grow forever (00014): the
-- reaper deletes rows older than PULSE_AUDIT_RETENTION (docs/operations.md),
-- in bounded batches. The guard refuses every UPDATE and the deletion of any
-- row younger than a day, so a mistaken statement (or a retention set to
-- minutes) cannot erase what just happened; the reaper refuses a retention
-- below a day at start.
-- +goose StatementBegin
CREATE FUNCTION control_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND OLD.at < now() - interval '1 day' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'control_events is append-only (rows younger than a day are never deleted)'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'control_events_append_only';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER control_events_append_only
    BEFORE UPDATE OR DELETE ON control_events
    FOR EACH ROW
    EXECUTE FUNCTION control_events_append_only();

-- ---------------------------------------------------------------------------
-- schedules (00003, 00008): docs/schedules.md. A schedule turns into one
-- ordinary job per occurrence. The scheduler reads due rows (enabled AND
-- next_run_at <= now) FOR UPDATE SKIP LOCKED, inserts the job with a
-- deterministic id (uuid v5 of schedule id and occurrence), and moves
-- next_run_at by compare-and-set in the same transaction, so any number of
-- scheduler replicas fire each occurrence exactly once.
CREATE TABLE schedules (
    id             uuid        PRIMARY KEY,
    name           text        NOT NULL,
    topic          text        NOT NULL,
    -- The args every fired job gets (a JSON object).
    args           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- A job's default priority (jobs.priority). control-api sends the
    -- priority it resolved; this is the same default for a hand-written
    -- INSERT.
    priority       smallint    NOT NULL DEFAULT 5,
    max_attempts   integer     NOT NULL DEFAULT 25,
    -- 'at' (one RFC 3339 instant), 'every' (a Go duration, at least 1s) or
    -- 'cron' (robfig/cron, seconds field optional, descriptors allowed).
    kind           text        NOT NULL,
    expression     text        NOT NULL,
    -- The IANA zone a cron expression is read in.
    time_zone      text        NOT NULL DEFAULT 'UTC',
    enabled        boolean     NOT NULL DEFAULT true,
    -- The next occurrence to fire; NULL once an At schedule has fired.
    next_run_at    timestamptz,
    -- The occurrence fired last.
    last_fired_at  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT schedules_name_format CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    CONSTRAINT schedules_topic_format CHECK (topic ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    CONSTRAINT schedules_args_object CHECK (jsonb_typeof(args) = 'object'),
    CONSTRAINT schedules_priority_range CHECK (priority BETWEEN 0 AND 10),
    CONSTRAINT schedules_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 100),
    CONSTRAINT schedules_kind_known CHECK (kind IN ('at', 'every', 'cron')),
    CONSTRAINT schedules_expression_present CHECK (expression <> '')
);

CREATE UNIQUE INDEX schedules_name_key ON schedules (name);

-- The scheduler's due scan and its "sleep until the next one" read.
CREATE INDEX schedules_due_idx ON schedules (next_run_at) WHERE enabled AND next_run_at IS NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION schedules_stamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER schedules_stamp
    BEFORE UPDATE ON schedules
    FOR EACH ROW
    EXECUTE FUNCTION schedules_stamp();

-- Every change wakes the schedulers, so a created, updated, enabled or
-- disabled schedule takes effect without waiting for a reconcile.
-- +goose StatementBegin
CREATE FUNCTION schedules_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pulse_schedules_changed', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER schedules_notify
    AFTER INSERT OR UPDATE OR DELETE ON schedules
    FOR EACH STATEMENT
    EXECUTE FUNCTION schedules_notify();

-- ---------------------------------------------------------------------------
-- worker_presence, worker_topic_seen (00006): which workers are connected,
-- to which topics (docs/operations.md, ADR-0012). Each dispatch-gateway
-- writes the rows of the StreamJobs streams it holds: one row when a stream
-- opens, one set-based upsert per PULSE_PRESENCE_INTERVAL for all of its
-- streams, and a delete when a stream closes. A gateway that dies stops
-- refreshing: its rows expire at expires_at, readers ignore them from then
-- on, and any gateway deletes them in bounded batches. control-api reads
-- the table to explain a job that waits because nothing serves its topic
-- (reason no_worker).
--
-- worker_id is the id the worker opened its stream with; principal is the
-- authenticated identity it opened it as ('anonymous' with auth off). A
-- live row keeps its worker id to its principal: another identity's open of
-- the same worker id is refused while the row has not expired, on every
-- gateway, because the check is the upsert's conflict on this key.
--
-- The refresh rewrites every row each interval without touching a key or
-- an indexed column: room on each page (fillfactor 50) lets those be HOT
-- updates.
CREATE TABLE worker_presence (
    worker_id    text        PRIMARY KEY,
    principal    text        NOT NULL,
    gateway      text        NOT NULL,
    topics       text[]      NOT NULL,
    -- When the stream holding the row opened; a close deletes the row only
    -- while it still carries its own stream's connected_at, so a reconnect
    -- that raced the old stream's close keeps its row.
    connected_at timestamptz NOT NULL DEFAULT now(),
    last_seen    timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,

    CONSTRAINT worker_presence_expires_after_seen CHECK (expires_at > last_seen)
) WITH (fillfactor = 50);

-- When a worker last served each topic, written when presence rows leave
-- (a stream closed, or an expired row was deleted): "no worker has served
-- topic t since ..." survives the rows. One row per topic ever served.
CREATE TABLE worker_topic_seen (
    topic     text        PRIMARY KEY,
    last_seen timestamptz NOT NULL
);

-- ---------------------------------------------------------------------------
-- retry_policy (00007, 00010): the fleet's retry backoff, once, for every
-- service (ADR-0013). A failed attempt n of a job that has attempts left,
-- and no retry policy of its own, waits
--
--     least(n² × backoff_unit, backoff_max)
--
-- before it can be claimed again, whether a worker reported the failure
-- (the gateway's report statement) or its lease lapsed (the reaper's
-- sweep). Both statements call pulse_retry_delay.
--
-- The policy is one row. Change it with an UPDATE (it applies to the next
-- failure settled, on every replica, without a restart):
--
--     UPDATE retry_policy SET backoff_unit = '2 seconds', backoff_max = '30 minutes';
--
-- or with PULSE_RETRY_BACKOFF_UNIT / PULSE_RETRY_BACKOFF_MAX on a
-- dispatch-gateway or the reaper, which write the row when the service
-- starts (and log that they did; docs/operations.md). updated_at and
-- updated_by say who set it last: a service names itself, and an UPDATE
-- that does not set updated_by is recorded as its application_name and
-- user ("psql as postgres"). 'migration 00007' names the row as the schema
-- wrote it (pkg/server/retrypolicy recognises it).
CREATE TABLE retry_policy (
    id           boolean     PRIMARY KEY DEFAULT true,
    backoff_unit interval    NOT NULL DEFAULT interval '1 second',
    backoff_max  interval    NOT NULL DEFAULT interval '1 hour',
    updated_at   timestamptz NOT NULL DEFAULT now(),
    updated_by   text        NOT NULL DEFAULT 'migration 00007',

    -- One row: the primary key is a boolean that must be true.
    CONSTRAINT retry_policy_one_row CHECK (id),
    -- 0 retries at once; a day per attempt² is already far past any use.
    CONSTRAINT retry_policy_unit_range CHECK (backoff_unit >= interval '0' AND backoff_unit <= interval '1 day'),
    -- The cap is at least the unit and at most 30 days, so next_run_at
    -- always stays a finite time a claim will reach.
    CONSTRAINT retry_policy_max_range CHECK (backoff_max >= backoff_unit AND backoff_max <= interval '30 days')
);

INSERT INTO retry_policy DEFAULT VALUES;

-- +goose StatementBegin
CREATE FUNCTION retry_policy_stamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    IF NEW.updated_by IS NOT DISTINCT FROM OLD.updated_by THEN
        NEW.updated_by := format('%s as %s',
            coalesce(nullif(current_setting('application_name', true), ''), 'a client'), session_user);
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER retry_policy_stamp
    BEFORE UPDATE ON retry_policy
    FOR EACH ROW
    EXECUTE FUNCTION retry_policy_stamp();

-- The row must exist: the report and the reap read it in every statement
-- that settles a failure, and a missing policy would fail them all.
-- +goose StatementBegin
CREATE FUNCTION retry_policy_keep() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'retry_policy keeps its one row; UPDATE it instead'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'retry_policy_one_row';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER retry_policy_keep
    BEFORE DELETE ON retry_policy
    FOR EACH ROW
    EXECUTE FUNCTION retry_policy_keep();

CREATE TRIGGER retry_policy_keep_truncate
    BEFORE TRUNCATE ON retry_policy
    FOR EACH STATEMENT
    EXECUTE FUNCTION retry_policy_keep();

-- The policy's two numbers, for a caller that has no other source: each is
-- a query, run once per call. The report and the reap do not call these:
-- they read the row once per statement (an InitPlan) and pass it in.
CREATE FUNCTION pulse_retry_unit() RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT backoff_unit FROM retry_policy $$;

CREATE FUNCTION pulse_retry_max() RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT backoff_max FROM retry_policy $$;

-- pulse_retry_delay: the wait after failed attempt number attempt of a job
-- whose own policy columns are job_base, job_max and job_fixed (00010,
-- ADR-0018). base and cap are the retry_policy row (the report and the
-- reap read it once per statement and pass it in; NULL reads it here).
--
--   fixed         job_fixed, exactly;
--   exponential   least(job_base × 2^(attempt-1), coalesce(job_max, cap))
--                 × a uniform factor in [0.8, 1]: never above the cap,
--                 at most a fifth early, so jobs that failed together do
--                 not all come back together;
--   none          least(attempt² × base, cap), the retry_policy row.
--
-- The arithmetic is in seconds (double precision) so 2^99 × 366 days, the
-- largest product max_attempts allows, is compared with the cap before it
-- becomes an interval, which could not hold it.
--
-- One SQL expression with no query inside, so Postgres inlines it into the
-- calling statement (ADR-0013): no function call per row. base and cap,
-- which callers pass as subqueries, appear once each, since a subquery
-- argument used twice stops the inlining; the defaults call
-- pulse_retry_unit() / pulse_retry_max(), which COALESCE evaluates only
-- when needed. random() makes it VOLATILE, which inlining allows.
-- +goose StatementBegin
CREATE FUNCTION pulse_retry_delay(attempt int, base interval, cap interval,
                                  job_base interval, job_max interval, job_fixed interval)
RETURNS interval
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
AS $$
SELECT CASE
    WHEN job_fixed IS NOT NULL THEN job_fixed
    ELSE make_interval(secs => LEAST(
            CASE WHEN job_base IS NULL
                 THEN power(attempt, 2) * extract(epoch FROM COALESCE(base, pulse_retry_unit()))
                 ELSE power(2, attempt - 1) * extract(epoch FROM job_base) END,
            extract(epoch FROM COALESCE(job_max, cap, pulse_retry_max())))
        * CASE WHEN job_base IS NULL THEN 1 ELSE 0.8 + 0.2 * random() END)
END
$$;
-- +goose StatementEnd

-- The short form, for any other caller (SELECT pulse_retry_delay(3) in
-- psql): the same formula with no job policy. VOLATILE like the overload
-- it calls, so it is inlined too.
CREATE FUNCTION pulse_retry_delay(attempt int, base interval DEFAULT NULL, cap interval DEFAULT NULL)
RETURNS interval
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
AS $$ SELECT pulse_retry_delay(attempt, base, cap, NULL::interval, NULL::interval, NULL::interval) $$;

-- ---------------------------------------------------------------------------
-- topic_limits (00009): fleet-wide concurrency limits per topic
-- (docs/topics.md, ADR-0017). A topic with a row here never has more than
-- max_running RUNNING jobs: every claim that may take a job of a limited
-- topic holds that topic's advisory lock from before its claim statement's
-- snapshot until it commits, and takes at most max_running - running of it
-- (jobstore/claim.go). A topic without a row costs the claim one probe of
-- this table's primary key.
CREATE TABLE topic_limits (
    topic       text        PRIMARY KEY,
    -- 0 lets nothing of the topic start (like a drain pause of the topic,
    -- without its audit trail).
    max_running integer     NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- Who set the limit: the authenticated identity.
    updated_by  text        NOT NULL,

    -- The rule of jobs_topic_format.
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
CREATE FUNCTION topic_limits_barrier() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(483006378853);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER topic_limits_barrier
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON topic_limits
    FOR EACH STATEMENT
    EXECUTE FUNCTION topic_limits_barrier();

-- ---------------------------------------------------------------------------
-- job_throughput (00011, ADR-0019): how many attempts finished, per minute
-- and topic, kept apart from jobs so the numbers outlive retention (which
-- deletes finished jobs) and cost nothing to read (the dashboard's chart
-- and per-topic table read a few hundred rows, never the jobs table).
--
-- The statements that settle attempts count them in the same statement, so
-- a count exists exactly when its transition committed: the gateway's
-- report (completed, failed, dead lettered) and the reaper's sweep of
-- expired leases (failed, dead lettered). Each writer adds to its own rows
-- (writer = the gateway id, or the reaper), so replicas never wait on each
-- other's row locks; readers sum over writers. The reaper deletes rows
-- older than its throughput retention.
CREATE TABLE job_throughput (
    bucket        timestamptz NOT NULL,
    topic         text        NOT NULL,
    writer        text        NOT NULL,
    -- Attempts that completed.
    completed     bigint      NOT NULL DEFAULT 0,
    -- Attempts that failed: retried, or dead lettered (both count here).
    failed        bigint      NOT NULL DEFAULT 0,
    -- Of the failed, those that dead lettered the job.
    dead_lettered bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, topic, writer),
    CONSTRAINT job_throughput_bucket_minute CHECK (bucket = date_trunc('minute', bucket, 'UTC')),
    CONSTRAINT job_throughput_counts CHECK (completed >= 0 AND failed >= 0 AND dead_lettered BETWEEN 0 AND failed),
    CONSTRAINT job_throughput_writer CHECK (writer <> '' AND length(writer) <= 200)
) WITH (fillfactor = 70);

-- +goose Down
-- Everything the baseline made: the schema is empty again.
DROP TABLE job_throughput;
DROP TABLE topic_limits;
DROP FUNCTION topic_limits_barrier();
DROP FUNCTION pulse_retry_delay(int, interval, interval);
DROP FUNCTION pulse_retry_delay(int, interval, interval, interval, interval, interval);
DROP FUNCTION pulse_retry_max();
DROP FUNCTION pulse_retry_unit();
DROP TABLE retry_policy;
DROP FUNCTION retry_policy_keep();
DROP FUNCTION retry_policy_stamp();
DROP TABLE worker_topic_seen;
DROP TABLE worker_presence;
DROP TABLE schedules;
DROP FUNCTION schedules_notify();
DROP FUNCTION schedules_stamp();
DROP TABLE control_events;
DROP FUNCTION control_events_append_only();
DROP TABLE dispatch_control;
DROP FUNCTION dispatch_control_notify();
DROP FUNCTION dispatch_control_stamp();
DROP SEQUENCE dispatch_control_version;
DROP TABLE job_uniques;
DROP TABLE jobs;
DROP FUNCTION jobs_notify_insert();
DROP FUNCTION jobs_guard_truncate();
DROP FUNCTION jobs_guard_delete();
DROP FUNCTION jobs_guard_errors();
DROP FUNCTION jobs_guard_identity();
DROP FUNCTION jobs_guard_transition();
DROP FUNCTION jobs_guard_spec();
DROP FUNCTION jobs_guard_birth();
DROP FUNCTION pulse_is_terminal(text);
