-- +goose Up
-- The jobs table is the queue. Every status change is checked by
-- jobs_guard_transition below, so no service bug and no hand-typed UPDATE
-- can move a job along an edge outside the transition table:
--   PENDING, RETRYING -> RUNNING; RUNNING -> COMPLETED, RETRYING, DEAD_LETTERED;
--   PENDING, RETRYING, RUNNING -> CANCELED; DEAD_LETTERED, CANCELED -> PENDING.

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

    CONSTRAINT jobs_status_known CHECK (status IN
        ('PENDING', 'RUNNING', 'RETRYING', 'COMPLETED', 'DEAD_LETTERED', 'CANCELED')),
    CONSTRAINT jobs_topic_format CHECK (topic ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    CONSTRAINT jobs_args_object CHECK (jsonb_typeof(args) = 'object'),
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
    CONSTRAINT jobs_idempotency_key_length CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 255)
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

-- The WHEN clause is the allowed-transition table itself, evaluated as a
-- plain expression: legal updates (every claim, report and heartbeat) never
-- enter PL/pgSQL, and the function runs only to reject, with a message that
-- names the rule.
CREATE TRIGGER jobs_guard_transition
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

-- +goose Down
DROP TABLE jobs;
DROP FUNCTION jobs_notify_insert();
DROP FUNCTION jobs_guard_transition();
DROP FUNCTION pulse_is_terminal(text);
