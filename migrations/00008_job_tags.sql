-- Job tags (ADR-0046): labels given at submit (`"tags": ["tenant=acme",
-- "batch-7"]`) that listings filter by. At most 16, each 1..64 of
-- [A-Za-z0-9._:=/-] starting with a letter or digit (pulsetype.MaxTags,
-- MaxTagLength, TagPattern): no comma, which the insert's row source uses
-- to carry a job's tags as one text. Like what else a producer submitted
-- they never change (jobs_guard_tags); the birth rule is a BEFORE INSERT
-- trigger, not a CHECK, because no UPDATE can change them (ADR-0020): a
-- claim or a report never evaluates it. The GIN index that serves the
-- filter is built CONCURRENTLY by 00009.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs ADD COLUMN tags text[];

-- +goose StatementBegin
CREATE FUNCTION pulse_tags_valid(tags text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT cardinality(tags) BETWEEN 1 AND 16 AND array_ndims(tags) = 1
       AND NOT EXISTS (SELECT 1 FROM unnest(tags) AS t(tag)
                       WHERE tag IS NULL OR length(tag) > 64 OR tag !~ '^[A-Za-z0-9][A-Za-z0-9._:=/-]*$')
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_tags_birth() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"', TG_TABLE_NAME, 'jobs_tags_format'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_tags_format', TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_tags_birth
    BEFORE INSERT ON jobs
    FOR EACH ROW
    WHEN (NEW.tags IS NOT NULL AND NOT pulse_tags_valid(NEW.tags))
    EXECUTE FUNCTION jobs_guard_tags_birth();

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_tags() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'job identity is immutable: % of job % cannot change', 'tags', OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable', COLUMN = 'tags';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_tags
    AFTER UPDATE OF tags ON jobs
    FOR EACH ROW
    WHEN (OLD.tags IS DISTINCT FROM NEW.tags)
    EXECUTE FUNCTION jobs_guard_tags();

-- +goose Down
DROP TRIGGER jobs_guard_tags ON jobs;
DROP FUNCTION jobs_guard_tags();
DROP TRIGGER jobs_guard_tags_birth ON jobs;
DROP FUNCTION jobs_guard_tags_birth();
DROP FUNCTION pulse_tags_valid(text[]);
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs DROP COLUMN tags;
