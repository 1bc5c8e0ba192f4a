-- +goose Up
-- Which workers are connected, to which topics (docs/operations.md,
-- ADR-0012). Each dispatch-gateway writes the rows of the StreamJobs
-- streams it holds: one row when a stream opens, one set-based upsert per
-- PULSE_PRESENCE_INTERVAL for all of its streams, and a delete when a
-- stream closes. A gateway that dies stops refreshing: its rows expire at
-- expires_at, readers ignore them from then on, and any gateway deletes
-- them in bounded batches. control-api reads the table to explain a job
-- that waits because nothing serves its topic (reason no_worker).
--
-- worker_id is the id the worker opened its stream with; principal is the
-- authenticated identity it opened it as ('anonymous' with auth off). A
-- live row keeps its worker id to its principal: another identity's open of
-- the same worker id is refused while the row has not expired, on every
-- gateway, because the check is the upsert's conflict on this key.
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
);

-- The refresh rewrites every row each interval without touching a key or
-- an indexed column: room on each page lets those be HOT updates.
ALTER TABLE worker_presence SET (fillfactor = 50);

-- When a worker last served each topic, written when presence rows leave
-- (a stream closed, or an expired row was deleted): "no worker has served
-- topic t since ..." survives the rows. One row per topic ever served.
CREATE TABLE worker_topic_seen (
    topic     text        PRIMARY KEY,
    last_seen timestamptz NOT NULL
);

-- +goose Down
DROP TABLE worker_topic_seen;
DROP TABLE worker_presence;
