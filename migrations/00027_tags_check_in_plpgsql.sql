-- pulse_tags_valid (00008), the test a tagged job's tags pass at birth,
-- becomes a PL/pgSQL function with the same body (ADR-0071). As a SQL
-- function Postgres tried to inline it into jobs_guard_tags_birth's WHEN
-- clause in every INSERT statement, tagged jobs or not: it parsed and
-- analysed the body each time, met the EXISTS subquery a WHEN clause may
-- not hold, and gave up — a tenth of a one-row insert's time in a
-- profile, 50-80 us. Postgres never tries to inline a PL/pgSQL function.
-- A tagged job calls it once, as it called the SQL function; an untagged
-- job (NULL tags) never calls it. No lock on jobs: only the function
-- changes.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pulse_tags_valid(tags text[]) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN cardinality(tags) BETWEEN 1 AND 16 AND array_ndims(tags) = 1
       AND NOT EXISTS (SELECT 1 FROM unnest(tags) AS t(tag)
                       WHERE tag IS NULL OR length(tag) > 64 OR tag !~ '^[A-Za-z0-9][A-Za-z0-9._:=/-]*$');
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pulse_tags_valid(tags text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT cardinality(tags) BETWEEN 1 AND 16 AND array_ndims(tags) = 1
       AND NOT EXISTS (SELECT 1 FROM unnest(tags) AS t(tag)
                       WHERE tag IS NULL OR length(tag) > 64 OR tag !~ '^[A-Za-z0-9][A-Za-z0-9._:=/-]*$')
$$;
-- +goose StatementEnd
