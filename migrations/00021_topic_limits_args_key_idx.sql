-- Which topics take a job's rate key from an args field (ADR-0051), found
-- by an index: an INSERT of jobs asks once per statement whether any topic
-- does, and only then looks up each job's topic, so a submit to a topic
-- without such a limit reads nothing of topic_limits per job.
-- topic_limits is small and only operators write it; a plain CREATE INDEX
-- holds off their writes for the moment it takes.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
CREATE INDEX topic_limits_args_key_idx ON topic_limits (topic) WHERE left(rate_key, 5) = 'args:';

-- +goose Down
SET LOCAL lock_timeout = '500ms';
DROP INDEX topic_limits_args_key_idx;
