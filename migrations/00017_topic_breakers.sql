-- The circuit breaker (ADR-0053): per topic, optional. The reaper's breaker
-- loop reads each topic's recent outcomes from job_throughput and, when the
-- failed share of at least min_volume settled attempts within
-- window_length reaches failure_ratio, opens the breaker: it pauses the
-- topic through dispatch_control (actor 'breaker', a reason naming the
-- ratio and the window, until = now + cooldown, audited in control_events
-- like any pause) and sets the topic's max_running to 1, so that when the
-- pause ends the topic is half-open: one attempt at a time. The first
-- outcome decides: a completion closes the breaker (the topic's limit is
-- restored), a failure opens it again. An operator's resume (or pause) of
-- the topic overrides: the breaker closes and restores the limit.
--
-- Counting: outcomes from since_at on, over at most window_length.
-- job_throughput counts per minute, so since_at's minute is read minus
-- what it held when since_at was set (base_completed, base_failed): a
-- breaker that just closed is not opened again by the failures that
-- opened it.

-- +goose Up
CREATE TABLE topic_breakers (
    topic          text             PRIMARY KEY,
    failure_ratio  double precision NOT NULL,
    window_length  interval         NOT NULL,
    min_volume     integer          NOT NULL,
    cooldown       interval         NOT NULL,
    state          text             NOT NULL DEFAULT 'closed',
    since_at       timestamptz      NOT NULL DEFAULT now(),
    base_completed bigint           NOT NULL DEFAULT 0,
    base_failed    bigint           NOT NULL DEFAULT 0,
    -- When it last opened, and until when that opening pauses the topic.
    opened_at      timestamptz,
    open_until     timestamptz,
    -- How many times it opened (half-open failures included).
    opens          bigint           NOT NULL DEFAULT 0,
    -- The topic's max_running before the breaker set its trial limit of
    -- 1: limit_saved says the breaker holds one to restore, saved_max_running
    -- is it (NULL: the topic had no limit row).
    limit_saved        boolean      NOT NULL DEFAULT false,
    saved_max_running  integer,
    updated_at     timestamptz      NOT NULL DEFAULT now(),
    -- Who set the configuration: the authenticated identity.
    updated_by     text             NOT NULL,

    CONSTRAINT topic_breakers_topic_format CHECK (length(topic) <= 128 AND topic ~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$'),
    CONSTRAINT topic_breakers_ratio_range CHECK (failure_ratio > 0 AND failure_ratio <= 1),
    CONSTRAINT topic_breakers_window_range CHECK (window_length >= interval '1 minute' AND window_length <= interval '1 day'),
    CONSTRAINT topic_breakers_min_volume_range CHECK (min_volume BETWEEN 1 AND 1000000),
    CONSTRAINT topic_breakers_cooldown_range CHECK (cooldown >= interval '1 second' AND cooldown <= interval '1 day'),
    CONSTRAINT topic_breakers_state_known CHECK (state IN ('closed', 'open', 'half_open')),
    CONSTRAINT topic_breakers_open_explained CHECK (state <> 'open' OR (opened_at IS NOT NULL AND open_until IS NOT NULL)),
    CONSTRAINT topic_breakers_updated_by CHECK (updated_by <> '')
);

-- +goose Down
DROP TABLE topic_breakers;
