-- Dependencies between jobs (ADR-0047, docs/workflows.md): a job may
-- depend on others (its parents) and waits, unclaimable, until every
-- parent is finished.
--
-- - job_dependencies holds the edges (parent_id, child_id,
--   on_parent_failure), written in the child's own transaction (the one
--   that inserted it) and never changed after: job_dependencies_guard
--   refuses UPDATE, and an edge to a job born in an earlier transaction.
--   Rows go with either job (ON DELETE CASCADE: retention deletes only
--   finished jobs, and a parent is finished before its child can be).
-- - jobs.blocked_by counts a job's unfinished parents. A blocked job is
--   never claimable: jobs_blocked_not_runnable allows blocked_by > 0 only
--   with PENDING or CANCELED, whatever statement tries, and the claim
--   walks jobs_claim_idx, rebuilt by 00012 to hold only blocked_by = 0.
-- - jobs.has_dependents marks a job some edge names as a parent, and
--   jobs.has_parents one some edge names as a child (set when the edge is
--   written, never cleared), so an ordinary job's settle or retry
--   evaluates one boolean in the WHEN clauses of jobs_release_dependents
--   and jobs_recount_blocked, and calls no function.
-- - jobs.workflow_id names the graph a job was submitted in (one
--   SubmitJobs call with dependencies: the id of its first job); it never
--   changes.
--
-- Writing edges (job_dependencies_added, once per INSERT statement):
-- parents and children are locked (FOR NO KEY UPDATE, in id order), so a
-- parent's concurrent settle either committed before (its status is then
-- seen and counted as finished) or waits for the edge's commit (its
-- release trigger then sees the edge); each child's blocked_by grows by
-- its unfinished parents in one UPDATE; a child of a parent already
-- DEAD_LETTERED or CANCELED whose edge says 'cancel' is canceled at once.
--
-- Releasing (jobs_release_dependents, a row trigger on a status change of
-- a job with dependents): when a parent finishes, each PENDING child's
-- blocked_by drops by one (COMPLETED, or a failure whose edge says 'run')
-- and becomes claimable at 0, its next_run_at raised to the parent's
-- finished_at (no child starts before a parent finished, whatever clock
-- the claim read), or it is CANCELED (a failure whose edge says 'cancel'),
-- which fires the trigger again for its own children: the cascade. The
-- topics of released children are NOTIFYed on pulse_jobs_ready, canceled
-- children's waiters on pulse_jobs_settled. Each parent's settle costs one
-- UPDATE per child edge: a fan-in of N parents is N decrements of one
-- row, no quadratic step. When a finished parent is retried back to
-- PENDING, its PENDING children's blocked_by is counted again.
--
-- jobs_recount_blocked (after a retry of a DEAD_LETTERED or CANCELED job
-- with parents) counts a retried child's unfinished parents again, under
-- a lock on them, so a retried child waits for parents still running.
--
-- Every trigger on jobs here runs AFTER (no BEFORE row trigger: ADR-0020)
-- and has a WHEN clause an ordinary job's statements never pass.
-- TRUNCATE jobs now names job_dependencies too (or CASCADE).
--
-- The CHECK is added NOT VALID and validated by 00011; the claim index is
-- rebuilt and jobs_workflow_idx built CONCURRENTLY by 00012, as
-- migrations/README.md asks.

-- +goose Up
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs
    ADD COLUMN blocked_by integer NOT NULL DEFAULT 0,
    ADD COLUMN has_dependents boolean NOT NULL DEFAULT false,
    ADD COLUMN has_parents boolean NOT NULL DEFAULT false,
    ADD COLUMN workflow_id uuid,
    ADD CONSTRAINT jobs_blocked_not_runnable
        CHECK (blocked_by >= 0 AND (blocked_by = 0 OR status IN ('PENDING', 'CANCELED'))) NOT VALID;

CREATE TABLE job_dependencies (
    parent_id         uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    child_id          uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    on_parent_failure text NOT NULL DEFAULT 'cancel',
    PRIMARY KEY (parent_id, child_id),
    CONSTRAINT job_dependencies_not_self CHECK (parent_id <> child_id),
    CONSTRAINT job_dependencies_policy_known CHECK (on_parent_failure IN ('cancel', 'run'))
);
CREATE INDEX job_dependencies_child_idx ON job_dependencies (child_id);

-- +goose StatementBegin
CREATE FUNCTION job_dependencies_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'dependencies are immutable: the edge % -> % cannot change (it goes with its jobs)', OLD.parent_id, OLD.child_id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'job_dependencies_immutable';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER job_dependencies_guard
    BEFORE UPDATE ON job_dependencies
    FOR EACH ROW
    EXECUTE FUNCTION job_dependencies_guard();

-- An edge goes only with one of its jobs (the foreign keys' cascade, run
-- from a trigger), never on its own.
CREATE TRIGGER job_dependencies_guard_delete
    BEFORE DELETE ON job_dependencies
    FOR EACH ROW
    WHEN (pg_trigger_depth() = 0)
    EXECUTE FUNCTION job_dependencies_guard();

-- +goose StatementBegin
CREATE FUNCTION job_dependencies_added() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    late uuid;
BEGIN
    -- Lock every job the new edges name, in id order (no cycle of waits
    -- between two submits): a parent's settle in flight commits first.
    PERFORM 1 FROM jobs
    WHERE id IN (SELECT parent_id FROM added UNION SELECT child_id FROM added)
    ORDER BY id
    FOR NO KEY UPDATE;

    -- A child gets its parents in the transaction that inserted it, never later.
    SELECT c.id INTO late
    FROM added AS a JOIN jobs AS c ON c.id = a.child_id
    WHERE c.xmin::text::bigint <> (pg_current_xact_id()::text::bigint % 4294967296)
       OR c.status NOT IN ('PENDING', 'CANCELED')
    LIMIT 1;
    IF late IS NOT NULL THEN
        RAISE EXCEPTION 'dependencies are immutable: job % was submitted by an earlier transaction (or a savepoint); its parents are given when it is submitted', late
            USING ERRCODE = 'check_violation', CONSTRAINT = 'job_dependencies_immutable';
    END IF;

    UPDATE jobs SET has_dependents = true
    WHERE id IN (SELECT parent_id FROM added)
      AND NOT has_dependents AND NOT pulse_is_terminal(status);

    UPDATE jobs AS c SET has_parents = true, blocked_by = c.blocked_by + w.n
    FROM (SELECT a.child_id, count(*) FILTER (WHERE NOT pulse_is_terminal(p.status)) AS n
          FROM added AS a JOIN jobs AS p ON p.id = a.parent_id
          GROUP BY a.child_id) AS w
    WHERE c.id = w.child_id AND c.status = 'PENDING';

    -- Children of a parent already failed or canceled, by their edge's
    -- policy (which fires jobs_release_dependents for their own children).
    UPDATE jobs AS c SET status = 'CANCELED', finished_at = GREATEST(now(), c.submitted_at)
    WHERE c.status = 'PENDING'
      AND c.id IN (SELECT a.child_id FROM added AS a JOIN jobs AS p ON p.id = a.parent_id
                   WHERE p.status IN ('DEAD_LETTERED', 'CANCELED') AND a.on_parent_failure = 'cancel');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER job_dependencies_added
    AFTER INSERT ON job_dependencies
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT
    EXECUTE FUNCTION job_dependencies_added();

-- +goose StatementBegin
CREATE FUNCTION jobs_release_dependents() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    children uuid[];
    n bigint;
BEGIN
    -- Each step reads the edges by job_dependencies' primary key, then the
    -- children by theirs (id = ANY): a fixed cost per child, whatever the
    -- size of the tables.
    IF pulse_is_terminal(NEW.status) THEN
        children := ARRAY(SELECT child_id FROM job_dependencies
                          WHERE parent_id = NEW.id AND (NEW.status = 'COMPLETED' OR on_parent_failure = 'run'));
        IF cardinality(children) > 0 THEN
            WITH released AS (
                UPDATE jobs AS c
                SET blocked_by = c.blocked_by - 1,
                    next_run_at = GREATEST(c.next_run_at, NEW.finished_at)
                WHERE c.id = ANY(children) AND c.status = 'PENDING' AND c.blocked_by > 0
                RETURNING c.topic, c.blocked_by, c.next_run_at
            )
            SELECT count(pg_notify('pulse_jobs_ready', t.topic)) INTO n
            FROM (SELECT DISTINCT topic FROM released WHERE blocked_by = 0 AND next_run_at <= now()) AS t;
        END IF;

        IF NEW.status <> 'COMPLETED' THEN
            children := ARRAY(SELECT child_id FROM job_dependencies
                              WHERE parent_id = NEW.id AND on_parent_failure = 'cancel');
            IF cardinality(children) > 0 THEN
                WITH canceled AS (
                    UPDATE jobs AS c
                    SET status = 'CANCELED', finished_at = GREATEST(now(), c.submitted_at),
                        blocked_by = GREATEST(c.blocked_by - 1, 0)
                    WHERE c.id = ANY(children) AND c.status = 'PENDING'
                    RETURNING c.id
                )
                SELECT count(pulse_notify_settled(ids)) INTO n
                FROM (SELECT array_agg(id) AS ids FROM canceled) AS k;
            END IF;
        END IF;
    ELSE
        -- A finished parent retried: its PENDING children wait for it again.
        PERFORM 1 FROM jobs AS c
        WHERE c.id IN (SELECT child_id FROM job_dependencies WHERE parent_id = NEW.id)
        ORDER BY c.id FOR NO KEY UPDATE;
        UPDATE jobs AS c
        SET blocked_by = (SELECT count(*) FROM job_dependencies AS d JOIN jobs AS p ON p.id = d.parent_id
                          WHERE d.child_id = c.id AND NOT pulse_is_terminal(p.status))
        WHERE c.id IN (SELECT child_id FROM job_dependencies WHERE parent_id = NEW.id)
          AND c.status = 'PENDING';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_release_dependents
    AFTER UPDATE OF status ON jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
          AND (NEW.status IN ('COMPLETED', 'DEAD_LETTERED', 'CANCELED')
               OR OLD.status IN ('DEAD_LETTERED', 'CANCELED')))
    EXECUTE FUNCTION jobs_release_dependents();

-- +goose StatementBegin
CREATE FUNCTION jobs_recount_blocked() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Parents' settles in flight commit first (their row locks).
    PERFORM 1 FROM jobs
    WHERE id IN (SELECT parent_id FROM job_dependencies WHERE child_id = NEW.id)
    ORDER BY id FOR SHARE;
    UPDATE jobs AS c
    SET blocked_by = w.n
    FROM (SELECT count(*) AS n FROM job_dependencies AS d JOIN jobs AS p ON p.id = d.parent_id
          WHERE d.child_id = NEW.id AND NOT pulse_is_terminal(p.status)) AS w
    WHERE c.id = NEW.id AND c.status = 'PENDING' AND c.blocked_by <> w.n;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_recount_blocked
    AFTER UPDATE OF status ON jobs
    FOR EACH ROW
    WHEN (NEW.has_parents AND OLD.status IN ('DEAD_LETTERED', 'CANCELED') AND NEW.status = 'PENDING')
    EXECUTE FUNCTION jobs_recount_blocked();

-- blocked_by moves only by the triggers above (an edge written, a
-- parent's settle or retry, a child's retry), never by a statement of
-- its own: pg_trigger_depth() is 0 only outside every trigger.
-- +goose StatementBegin
CREATE FUNCTION jobs_guard_blocked_by() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'blocked_by of job % counts its unfinished parents: it changes only when they finish or are retried (% -> %)',
        OLD.id, OLD.blocked_by, NEW.blocked_by
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_blocked_by_release_only', COLUMN = 'blocked_by';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_blocked_by
    AFTER UPDATE OF blocked_by ON jobs
    FOR EACH ROW
    WHEN (OLD.blocked_by IS DISTINCT FROM NEW.blocked_by AND pg_trigger_depth() = 0)
    EXECUTE FUNCTION jobs_guard_blocked_by();

-- +goose StatementBegin
CREATE FUNCTION jobs_guard_dependencies() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'job identity is immutable: % of job % cannot change',
        CASE WHEN OLD.workflow_id IS DISTINCT FROM NEW.workflow_id THEN 'workflow_id'
             WHEN OLD.has_parents AND NOT NEW.has_parents THEN 'has_parents'
             ELSE 'has_dependents' END, OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_identity_immutable';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_guard_dependencies
    AFTER UPDATE OF workflow_id, has_dependents, has_parents ON jobs
    FOR EACH ROW
    WHEN (OLD.workflow_id IS DISTINCT FROM NEW.workflow_id OR (OLD.has_dependents AND NOT NEW.has_dependents)
          OR (OLD.has_parents AND NOT NEW.has_parents))
    EXECUTE FUNCTION jobs_guard_dependencies();

-- +goose Down
DROP TRIGGER jobs_guard_dependencies ON jobs;
DROP FUNCTION jobs_guard_dependencies();
DROP TRIGGER jobs_guard_blocked_by ON jobs;
DROP FUNCTION jobs_guard_blocked_by();
DROP TRIGGER jobs_recount_blocked ON jobs;
DROP FUNCTION jobs_recount_blocked();
DROP TRIGGER jobs_release_dependents ON jobs;
DROP FUNCTION jobs_release_dependents();
DROP TABLE job_dependencies;
DROP FUNCTION job_dependencies_added();
DROP FUNCTION job_dependencies_guard();
SET LOCAL lock_timeout = '500ms';
ALTER TABLE jobs
    DROP CONSTRAINT jobs_blocked_not_runnable,
    DROP COLUMN workflow_id,
    DROP COLUMN has_parents,
    DROP COLUMN has_dependents,
    DROP COLUMN blocked_by;
