-- +goose NO TRANSACTION
-- +goose Up
-- The schema's guards on jobs stop costing the claim and the report
-- anything (ADR-0020). Every rule stays, under the same name, refused with
-- the same SQLSTATE; only where Postgres checks some of them moves.
--
-- Why. Every UPDATE of a job, twice per job on the hot path (the claim
-- PENDING -> RUNNING, the report RUNNING -> COMPLETED) and once per
-- heartbeat and reap, paid for two things that could not refuse it:
--
--  1. Every CHECK constraint of the table, whether or not its columns
--     changed (00004). Six are on columns no UPDATE can change, since
--     jobs_guard_identity (00012) refuses any change to them: the topic
--     regex, args' type, the idempotency key's length, the retry policy's
--     form and range, the timeout's range. On an UPDATE they can never
--     fail; they only cost (a regex, and a jsonb_typeof that detoasts large
--     args).
--  2. A tuple lock. With any BEFORE UPDATE row trigger on a table, even one
--     whose WHEN clause is false, Postgres locks the row before updating it
--     (to hand the trigger a stable OLD), writing one Heap/LOCK WAL record
--     per row; BEFORE DELETE does the same for retention's deletes. The
--     guards only refuse (none changes NEW), so they need not run BEFORE.
--
-- What.
--
--   jobs_guard_transition  AFTER UPDATE                   (was BEFORE)
--   jobs_guard_identity    AFTER UPDATE OF id, topic, ... (was BEFORE)
--   jobs_guard_errors      AFTER UPDATE OF errors         (was BEFORE)
--   jobs_guard_delete      AFTER DELETE                   (was BEFORE)
--   jobs_guard_spec        BEFORE INSERT, new: the six CHECKs below, at
--                          birth
--
-- Same WHEN clauses, same column lists, same functions. An AFTER row
-- trigger's WHEN clause is evaluated as the row is written and queues
-- nothing when false, so a legal update still never enters PL/pgSQL; when
-- it is true the function runs at the end of the statement, raises, and
-- the statement fails and writes nothing, as before. All four move: one
-- BEFORE UPDATE trigger left behind would keep the lock.
-- jobs_guard_birth stays BEFORE INSERT (an insert locks nothing) and
-- jobs_guard_truncate stays a BEFORE TRUNCATE statement trigger.
--
-- jobs_args_object, jobs_idempotency_key_length, jobs_retry_form,
-- jobs_retry_range, jobs_timeout_range and jobs_topic_format stop being
-- CHECK constraints. jobs_guard_spec holds them: its WHEN clause is true
-- only when one of the six expressions is FALSE (a CHECK passes on NULL,
-- hence IS FALSE), and its function raises what Postgres raised for the
-- CHECK: SQLSTATE 23514, the constraint's name, the table, and the
-- message 'new row for relation "jobs" violates check constraint "..."',
-- naming the first broken rule in the constraints' name order, the order
-- Postgres checked them in. A legal insert evaluates the WHEN clause only.
-- They are enforced at birth and kept forever, because no UPDATE can
-- change those columns. Existing rows already satisfy them (the CHECKs
-- were validated), so nothing needs repair.
--
-- jobs_priority_range and jobs_max_attempts_range stay CHECKs: priority
-- and max_attempts may change after submit (an operator reprioritizes a
-- waiting job or raises its budget), and each is two integer comparisons.
--
-- What changes in what a refused statement reports:
--   - a statement that breaks a CHECK and a guard at once now names the
--     CHECK (CHECKs are checked as the row is written, AFTER triggers run
--     later); it named the guard. Setting errors to NULL is now refused by
--     the column's NOT NULL (23502) instead of jobs_errors_append_only.
--   - an insert that breaks one of the six rules and another rule
--     Postgres checks as the row is written (a NOT NULL column, a
--     remaining CHECK) now names the spec rule, which is checked first.
--   - a spec rule's refusal comes with the PL/pgSQL context of
--     jobs_guard_spec and without the CHECK's "Failing row contains ..."
--     detail.
-- A statement that breaks one rule reports what it reported before.
--
-- Outside a transaction, like 00004 and 00005, so that Down can restore
-- the CHECKs NOT VALID and validate them under a SHARE UPDATE EXCLUSIVE
-- lock. Each statement is atomic and can be re-run, and the order leaves
-- no moment without a rule: jobs_guard_spec exists before the CHECKs go,
-- and CREATE OR REPLACE TRIGGER swaps a guard from BEFORE to AFTER in one
-- step.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_guard_spec() RETURNS trigger
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
-- in name order): a row breaking both still names jobs_born_pending, as
-- when these rules were CHECKs.
CREATE OR REPLACE TRIGGER jobs_guard_spec
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

ALTER TABLE jobs
    DROP CONSTRAINT IF EXISTS jobs_args_object,
    DROP CONSTRAINT IF EXISTS jobs_idempotency_key_length,
    DROP CONSTRAINT IF EXISTS jobs_retry_form,
    DROP CONSTRAINT IF EXISTS jobs_retry_range,
    DROP CONSTRAINT IF EXISTS jobs_timeout_range,
    DROP CONSTRAINT IF EXISTS jobs_topic_format;

-- The guards of 00005, 00010 and 00012, AFTER instead of BEFORE; their
-- WHEN clauses and functions are unchanged.
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

CREATE OR REPLACE TRIGGER jobs_guard_identity
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

CREATE OR REPLACE TRIGGER jobs_guard_errors
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

CREATE OR REPLACE TRIGGER jobs_guard_delete
    AFTER DELETE ON jobs
    FOR EACH ROW
    WHEN (OLD.status NOT IN ('COMPLETED', 'DEAD_LETTERED', 'CANCELED'))
    EXECUTE FUNCTION jobs_guard_delete();

-- +goose Down
-- The CHECKs of 00001, 00004, 00008 and 00010 come back (NOT VALID, so
-- adding them is a catalog change; validated last) before jobs_guard_spec
-- goes, and the guards go back to BEFORE.
ALTER TABLE jobs
    DROP CONSTRAINT IF EXISTS jobs_args_object,
    ADD CONSTRAINT jobs_args_object CHECK (jsonb_typeof(args) = 'object') NOT VALID,
    DROP CONSTRAINT IF EXISTS jobs_idempotency_key_length,
    ADD CONSTRAINT jobs_idempotency_key_length
        CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 255) NOT VALID,
    DROP CONSTRAINT IF EXISTS jobs_retry_form,
    ADD CONSTRAINT jobs_retry_form CHECK (
        (retry_base IS NULL AND retry_max IS NULL)
        OR (retry_fixed IS NULL AND retry_base IS NOT NULL AND (retry_max IS NULL OR retry_max >= retry_base))) NOT VALID,
    DROP CONSTRAINT IF EXISTS jobs_retry_range,
    ADD CONSTRAINT jobs_retry_range CHECK (
        (retry_base IS NULL OR (retry_base >= interval '1 millisecond' AND retry_base <= interval '366 days'))
        AND (retry_max IS NULL OR (retry_max >= interval '1 millisecond' AND retry_max <= interval '366 days'))
        AND (retry_fixed IS NULL OR (retry_fixed >= interval '1 millisecond' AND retry_fixed <= interval '366 days'))) NOT VALID,
    DROP CONSTRAINT IF EXISTS jobs_timeout_range,
    ADD CONSTRAINT jobs_timeout_range
        CHECK (timeout IS NULL OR (timeout >= interval '1 second' AND timeout <= interval '24 hours')) NOT VALID,
    DROP CONSTRAINT IF EXISTS jobs_topic_format,
    ADD CONSTRAINT jobs_topic_format
        CHECK (length(topic) <= 128 AND topic ~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$') NOT VALID;

DROP TRIGGER IF EXISTS jobs_guard_spec ON jobs;
DROP FUNCTION IF EXISTS jobs_guard_spec();

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

CREATE OR REPLACE TRIGGER jobs_guard_identity
    BEFORE UPDATE OF id, topic, args, submitted_at, idempotency_key, schedule_id,
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

CREATE OR REPLACE TRIGGER jobs_guard_delete
    BEFORE DELETE ON jobs
    FOR EACH ROW
    WHEN (OLD.status NOT IN ('COMPLETED', 'DEAD_LETTERED', 'CANCELED'))
    EXECUTE FUNCTION jobs_guard_delete();

ALTER TABLE jobs VALIDATE CONSTRAINT jobs_args_object;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_idempotency_key_length;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_retry_form;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_retry_range;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_timeout_range;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_topic_format;
