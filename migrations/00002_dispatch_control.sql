-- +goose Up
-- Pause and resume dispatch (docs/pause.md, docs/adr/0007). One row per
-- pause scope: '*' is the global scope, any other scope is a topic. The
-- claim statement reads this table, so a committed pause stops every
-- gateway's claims at once; gateways also keep an in-memory copy (the gate)
-- refreshed by NOTIFY and polling.

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

-- +goose StatementBegin
CREATE FUNCTION control_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'control_events is append-only'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'control_events_append_only';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER control_events_append_only
    BEFORE UPDATE OR DELETE ON control_events
    FOR EACH ROW
    EXECUTE FUNCTION control_events_append_only();

-- +goose Down
DROP TABLE control_events;
DROP FUNCTION control_events_append_only();
DROP TABLE dispatch_control;
DROP FUNCTION dispatch_control_notify();
DROP FUNCTION dispatch_control_stamp();
DROP SEQUENCE dispatch_control_version;
