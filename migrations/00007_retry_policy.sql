-- +goose Up
-- The retry policy lives here, once, for every service (ADR-0013). A failed
-- attempt n of a job that has attempts left waits
--
--     least(n² × backoff_unit, backoff_max)
--
-- before it can be claimed again, whether a worker reported the failure
-- (the gateway's report statement) or its lease lapsed (the reaper's
-- sweep). Both statements call pulse_retry_delay; neither carries the
-- formula or the numbers any more.
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
-- user ("psql as postgres").
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

-- pulse_retry_delay is the wait after failed attempt number attempt.
-- base and cap default to the policy row; a caller that has them at hand
-- (the report and the reap read the row once per statement) or that
-- overrides them (a job with a retry policy of its own) passes them.
--
-- It is one SQL expression with no query inside, so Postgres inlines it
-- into the calling statement: no function call per row, the same plan and
-- cost as the formula written out (docs/adr/0013-retry-policy-in-postgres.md
-- has the measurements). A query in the body would stop the inlining, so
-- the defaults call pulse_retry_unit() / pulse_retry_max() instead, which
-- COALESCE evaluates only when base or cap is NULL.
CREATE FUNCTION pulse_retry_delay(attempt int, base interval DEFAULT NULL, cap interval DEFAULT NULL)
RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT LEAST(power(attempt, 2) * COALESCE(base, pulse_retry_unit()), COALESCE(cap, pulse_retry_max())) $$;

-- +goose Down
DROP FUNCTION pulse_retry_delay(int, interval, interval);
DROP FUNCTION pulse_retry_max();
DROP FUNCTION pulse_retry_unit();
DROP TABLE retry_policy;
DROP FUNCTION retry_policy_keep();
DROP FUNCTION retry_policy_stamp();
