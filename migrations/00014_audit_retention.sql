-- +goose Up
-- The audit of pauses and resumes (control_events, 00002) stays append-
-- only, but no longer grows forever: the reaper deletes rows older than
-- PULSE_AUDIT_RETENTION (docs/operations.md), in bounded batches. The
-- guard still refuses every UPDATE and the deletion of any row younger
-- than a day, so a mistaken statement (or a retention set to minutes)
-- cannot erase what just happened; the reaper refuses a retention below a
-- day at start.
--
-- Nothing here rewrites a table or takes more than the function's own
-- lock, so it runs in goose's transaction.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION control_events_append_only() RETURNS trigger
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION control_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'control_events is append-only'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'control_events_append_only';
END
$$;
-- +goose StatementEnd
