-- +goose Up
-- job_throughput: how many attempts finished, per minute and topic, kept
-- apart from jobs so the numbers outlive retention (which deletes finished
-- jobs) and cost nothing to read (the dashboard's chart and per-topic
-- table read a few hundred rows, never the jobs table).
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
DROP TABLE job_throughput;
