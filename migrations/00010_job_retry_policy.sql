-- +goose NO TRANSACTION
-- +goose Up
-- A job's own retry policy (ADR-0018). A producer may give a job the
-- backoff between its attempts, in exactly one of two forms:
--
--   exponential   retry_base (and optionally retry_max): failed attempt n
--                 waits about retry_base × 2^(n-1), never more than
--                 retry_max (NULL: the retry_policy row's backoff_max),
--                 jittered down by up to a fifth so jobs that failed
--                 together do not all come back together;
--   fixed         retry_fixed: every failed attempt waits exactly that.
--
-- A job with neither follows the retry_policy row (00007) as before:
-- least(n² × backoff_unit, backoff_max). Every duration is 1 millisecond
-- to 366 days.
--
-- The formula stays in one place: pulse_retry_delay gains an overload that
-- takes the job's three columns, and the 00007 form (attempt, base, cap)
-- becomes a call of it with no job policy. The report and the reap call
-- the overload, so a failure a worker reported and a lapsed lease wait
-- alike. A worker may also ask for its next attempt's wait (the result's
-- retry_after, never stored); the report uses it instead of this formula.
--
-- The three columns are part of what a producer submitted: like topic and
-- args they never change (jobs_identity_immutable, 00005's column
-- trigger, which now names them too).
--
-- Outside a transaction, like 00004, 00005 and 00008: the columns have no
-- default (a catalog change only), the CHECKs are added NOT VALID and
-- validated under SHARE UPDATE EXCLUSIVE, which lets claims, reports and
-- submits go on. Every statement can be re-run.
ALTER TABLE jobs
    ADD COLUMN IF NOT EXISTS retry_base  interval,
    ADD COLUMN IF NOT EXISTS retry_max   interval,
    ADD COLUMN IF NOT EXISTS retry_fixed interval;

-- Every CHECK on jobs runs on every claim, heartbeat and report (ADR-0010):
-- for a job without a policy of its own each of these is a few IS NULL
-- tests.
ALTER TABLE jobs
    DROP CONSTRAINT IF EXISTS jobs_retry_form,
    -- One form: none, fixed alone, or a base with an optional max that is
    -- not below it.
    ADD CONSTRAINT jobs_retry_form CHECK (
        (retry_base IS NULL AND retry_max IS NULL)
        OR (retry_fixed IS NULL AND retry_base IS NOT NULL AND (retry_max IS NULL OR retry_max >= retry_base))) NOT VALID,
    DROP CONSTRAINT IF EXISTS jobs_retry_range,
    -- jobspec holds the same bounds (MinRetryDelay, MaxRetryDelay).
    ADD CONSTRAINT jobs_retry_range CHECK (
        (retry_base IS NULL OR (retry_base >= interval '1 millisecond' AND retry_base <= interval '366 days'))
        AND (retry_max IS NULL OR (retry_max >= interval '1 millisecond' AND retry_max <= interval '366 days'))
        AND (retry_fixed IS NULL OR (retry_fixed >= interval '1 millisecond' AND retry_fixed <= interval '366 days'))) NOT VALID;

ALTER TABLE jobs VALIDATE CONSTRAINT jobs_retry_form;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_retry_range;

-- pulse_retry_delay with the job's policy: the wait after failed attempt
-- number attempt of a job whose columns are job_base, job_max and
-- job_fixed. base and cap are the retry_policy row (the report and the
-- reap read it once per statement and pass it in; NULL reads it here).
--
--   fixed         job_fixed, exactly;
--   exponential   least(job_base × 2^(attempt-1), coalesce(job_max, cap))
--                 × a uniform factor in [0.8, 1]: never above the cap,
--                 at most a fifth early;
--   none          least(attempt² × base, cap), the 00007 policy.
--
-- The arithmetic is in seconds (double precision) so 2^99 × 366 days, the
-- largest product max_attempts allows, is compared with the cap before it
-- becomes an interval, which could not hold it.
--
-- Still one SQL expression, so Postgres inlines it into the calling
-- statement (ADR-0013): base and cap, which callers pass as subqueries,
-- appear once each, since a subquery argument used twice stops the
-- inlining. random() makes it VOLATILE, which inlining allows.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pulse_retry_delay(attempt int, base interval, cap interval,
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

-- The 00007 form, for any other caller (SELECT pulse_retry_delay(3) in
-- psql): the same formula with no job policy. VOLATILE like the overload
-- it calls, so it is inlined too.
CREATE OR REPLACE FUNCTION pulse_retry_delay(attempt int, base interval DEFAULT NULL, cap interval DEFAULT NULL)
RETURNS interval
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
AS $$ SELECT pulse_retry_delay(attempt, base, cap, NULL::interval, NULL::interval, NULL::interval) $$;

-- Identity, as in 00005, with the retry policy: a column trigger, so a
-- statement that assigns none of these columns (every pulse statement but
-- the insert) does not evaluate its WHEN clause.
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
        WHEN NEW.retry_base IS DISTINCT FROM OLD.retry_base THEN 'retry_base'
        WHEN NEW.retry_max IS DISTINCT FROM OLD.retry_max THEN 'retry_max'
        WHEN NEW.retry_fixed IS DISTINCT FROM OLD.retry_fixed THEN 'retry_fixed'
    END;
    IF col IS NULL THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'job identity is immutable: % of job % cannot change', col, OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable', COLUMN = col;
END
$$;
-- +goose StatementEnd

CREATE OR REPLACE TRIGGER jobs_guard_identity
    BEFORE UPDATE OF id, topic, args, submitted_at, idempotency_key, schedule_id,
                     retry_base, retry_max, retry_fixed ON jobs
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
    )
    EXECUTE FUNCTION jobs_guard_identity();

-- +goose Down
-- 00005's identity guard and 00007's function come back, then the columns
-- go.
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

CREATE OR REPLACE FUNCTION pulse_retry_delay(attempt int, base interval DEFAULT NULL, cap interval DEFAULT NULL)
RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT LEAST(power(attempt, 2) * COALESCE(base, pulse_retry_unit()), COALESCE(cap, pulse_retry_max())) $$;

DROP FUNCTION IF EXISTS pulse_retry_delay(int, interval, interval, interval, interval, interval);

ALTER TABLE jobs
    DROP CONSTRAINT IF EXISTS jobs_retry_range,
    DROP CONSTRAINT IF EXISTS jobs_retry_form,
    DROP COLUMN IF EXISTS retry_fixed,
    DROP COLUMN IF EXISTS retry_max,
    DROP COLUMN IF EXISTS retry_base;
