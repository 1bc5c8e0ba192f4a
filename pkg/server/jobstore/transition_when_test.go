package jobstore_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/testtool"
)

// transitionMatrixSQL updates one row per combination of a job's status
// and what an UPDATE does to its lifecycle columns, and records in
// pg_temp.outcome which rule refused each (empty for none). Every row starts
// in its state with the schema's triggers off (session_replication_role
// replica: a DEAD_LETTERED job with attempts 2 cannot be reached through
// the rules in one step), then the UPDATE runs with them on, in a
// subtransaction of its own. The rows keep every CHECK, so what differs
// between two runs is only what the transition trigger says.
//
//	status      the six, from and to
//	attempts    kept, +1, 0, +2           (the row has 2)
//	snoozes     kept, +1, 0               (the row has 1)
//	locked_by   kept, another, NULL
//	started_at  kept, two hours ahead
//	finished_at now (or kept) when the new status is final, else NULL;
//	            or two hours ahead
const transitionMatrixSQL = `
DO $matrix$
DECLARE
    statuses text[] := ARRAY['PENDING', 'RUNNING', 'RETRYING', 'COMPLETED', 'DEAD_LETTERED', 'CANCELED'];
    final text[] := ARRAY['COMPLETED', 'DEAD_LETTERED', 'CANCELED'];
    k int := 0;
    o text; n text; da int; ds int; lb int; st int; fin int;
    job uuid;
    refused text;
BEGIN
    FOREACH o IN ARRAY statuses LOOP
    FOREACH n IN ARRAY statuses LOOP
    FOR da IN 0..3 LOOP
    FOR ds IN 0..2 LOOP
    FOR lb IN 0..2 LOOP
    FOR st IN 0..1 LOOP
    FOR fin IN 0..1 LOOP
        k := k + 1;
        job := gen_random_uuid();
        PERFORM set_config('session_replication_role', 'replica', true);
        INSERT INTO jobs (id, topic, status, attempts, snoozes, max_attempts, locked_by,
                          submitted_at, lease_until, started_at, finished_at)
        VALUES (job, 'matrix', o, 2, 1, 5, 'w', now() - interval '1 hour',
                CASE WHEN o = 'RUNNING' THEN now() + interval '1 minute' END,
                now() - interval '1 minute',
                CASE WHEN o = ANY (final) THEN now() - interval '1 minute' END);
        PERFORM set_config('session_replication_role', 'origin', true);
        BEGIN
            UPDATE jobs SET
                status = n,
                attempts = CASE da WHEN 0 THEN attempts WHEN 1 THEN attempts + 1 WHEN 2 THEN 0 ELSE attempts + 2 END,
                snoozes = CASE ds WHEN 0 THEN snoozes WHEN 1 THEN snoozes + 1 ELSE 0 END,
                locked_by = CASE lb WHEN 0 THEN locked_by WHEN 1 THEN 'v' END,
                lease_until = CASE WHEN n = 'RUNNING' THEN now() + interval '1 minute' END,
                started_at = CASE st WHEN 0 THEN started_at ELSE now() + interval '2 hours' END,
                finished_at = CASE
                    WHEN fin = 1 THEN now() + interval '2 hours'
                    WHEN n = ANY (final) THEN coalesce(finished_at, now()) END
            WHERE id = job;
            refused := '';
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS refused = CONSTRAINT_NAME;
            refused := coalesce(nullif(refused, ''), SQLSTATE);
        END;
        INSERT INTO pg_temp.outcome VALUES (k, refused);
    END LOOP; END LOOP; END LOOP; END LOOP; END LOOP; END LOOP; END LOOP;
END
$matrix$`

// TestTransitionGuardWhenHidesNoIllegalUpdate: jobs_guard_transition's
// WHEN clause (migration 00026, ADR-0071) only spares the function changes
// it has no objection to. The same matrix of updates runs twice: with the
// trigger as the schema has it, and with the function called for every
// row (a probe trigger without a WHEN clause, the trigger itself off).
// Each update must be refused by the same rule in both, or by none.
func TestTransitionGuardWhenHidesNoIllegalUpdate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()

	if _, err := conn.Exec(ctx, `SET session_replication_role = origin`); err != nil {
		msg := fmt.Sprintf("cannot set up rows in every state (session_replication_role needs a superuser): %v", err)
		if testtool.Skipped("superuser") {
			t.Skip(msg + "; skipped because " + testtool.EnvSkip + " lists superuser")
		}
		t.Fatal(msg + "; test as a superuser, or set " + testtool.EnvSkip + "=superuser")
	}
	_, err = conn.Exec(ctx, `CREATE TRIGGER jobs_guard_transition_probe AFTER UPDATE ON jobs
		FOR EACH ROW EXECUTE FUNCTION jobs_guard_transition()`)
	require.NoError(t, err)

	run := func(withWhen bool) map[int]string {
		t.Helper()
		on, off := "jobs_guard_transition", "jobs_guard_transition_probe"
		if !withWhen {
			on, off = off, on
		}
		_, err := conn.Exec(ctx, `ALTER TABLE jobs ENABLE TRIGGER `+on+`, DISABLE TRIGGER `+off)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS outcome (k int PRIMARY KEY, refused text NOT NULL); TRUNCATE pg_temp.outcome`)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, transitionMatrixSQL)
		require.NoError(t, err)
		rows, err := conn.Query(ctx, `SELECT k, refused FROM pg_temp.outcome`)
		require.NoError(t, err)
		out := map[int]string{}
		for rows.Next() {
			var k int
			var refused string
			require.NoError(t, rows.Scan(&k, &refused))
			out[k] = refused
		}
		require.NoError(t, rows.Err())
		return out
	}
	withWhen, always := run(true), run(false)

	require.Len(t, always, 6*6*4*3*3*2*2)
	require.Len(t, withWhen, len(always))
	byRule := map[string]int{}
	for k, want := range always {
		require.Equal(t, want, withWhen[k], "update %d: refused by %q with the function always called, by %q with the WHEN clause", k, want, withWhen[k])
		byRule[want]++
	}
	// The matrix reaches both sides of every rule the function holds.
	require.GreaterOrEqual(t, byRule[""], 10, "legal updates: %v", byRule)
	for _, rule := range []string{"jobs_status_transition", "jobs_terminal_frozen", "jobs_attempts_fence",
		"jobs_snooze_fence", "jobs_locked_by_claim_only", "jobs_timestamps_not_future"} {
		require.Positive(t, byRule[rule], "no update of the matrix breaks %s: %v", rule, byRule)
	}
}
