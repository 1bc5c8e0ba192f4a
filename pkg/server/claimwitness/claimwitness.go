// Package claimwitness judges pause exactness and topic limits (limits.go)
// by commit order. For pauses it installs
// a trigger that records which transaction claimed each job, and compares
// each claim's commit timestamp with the commit timestamps of the pause and
// resume events in control_events (written in the same transaction as the
// change itself). A claim of a paused scope that committed after the pause
// committed and before the scope was resumed is a late claim; the answer
// must be none.
//
// It is for tests and the load test: the trigger adds a row per claim. It
// needs a server with track_commit_timestamp = on (pgtest and the local
// fleet set it).
package claimwitness

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the witness needs of a pool or connection.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const installSQL = `
CREATE TABLE IF NOT EXISTS pulse_claim_witness (
    job_id    uuid    NOT NULL,
    topic     text    NOT NULL,
    attempt   integer NOT NULL,
    locked_by text    NOT NULL,
    xid       bigint  NOT NULL DEFAULT txid_current()
);
CREATE OR REPLACE FUNCTION pulse_claim_witness_record() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pulse_claim_witness (job_id, topic, attempt, locked_by)
    VALUES (NEW.id, NEW.topic, NEW.attempts, NEW.locked_by);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS pulse_claim_witness ON jobs;
CREATE TRIGGER pulse_claim_witness
    AFTER UPDATE ON jobs
    FOR EACH ROW
    WHEN (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING')
    EXECUTE FUNCTION pulse_claim_witness_record();`

// Install records every claim from now on. It fails, saying why, when the
// server does not keep commit timestamps.
func Install(ctx context.Context, db DB) error {
	var on string
	if err := db.QueryRow(ctx, `SHOW track_commit_timestamp`).Scan(&on); err != nil {
		return fmt.Errorf("claimwitness: %w", err)
	}
	if on != "on" {
		return fmt.Errorf("claimwitness: the server has track_commit_timestamp = %s; the witness judges by commit time and needs it on (postgresql.conf, then restart)", on)
	}
	if _, err := db.Exec(ctx, installSQL); err != nil {
		return fmt.Errorf("claimwitness: install: %w", err)
	}
	return nil
}

// Late is a claim that committed while its scope was paused.
type Late struct {
	JobID       string
	Topic       string
	Scope       string // the paused scope: "*" or the topic
	Version     int64  // the pause's dispatch_control version
	PauseCommit time.Time
	ClaimCommit time.Time
}

func (l Late) String() string {
	return fmt.Sprintf("job %s (%s) claimed %s after pause v%d of scope %q committed",
		l.JobID, l.Topic, l.ClaimCommit.Sub(l.PauseCommit), l.Version, l.Scope)
}

// lateSQL pairs every pause event with the next event of its scope (the
// resume, or a later pause that changed its mode or reason) and finds
// claims of the scope that committed between the two.
const lateSQL = `
WITH ev AS (
    SELECT scope, action, version, pg_xact_commit_timestamp(xmin) AS committed,
           lead(pg_xact_commit_timestamp(xmin)) OVER (PARTITION BY scope ORDER BY id) AS next_committed
    FROM control_events
), pauses AS (
    SELECT scope, version, committed AS paused, next_committed AS lifted
    FROM ev WHERE action = 'pause'
), claims AS (
    SELECT job_id, topic, pg_xact_commit_timestamp((xid % 4294967296)::text::xid) AS committed
    FROM pulse_claim_witness
)
SELECT c.job_id::text, c.topic, p.scope, p.version, p.paused, c.committed
FROM claims c
JOIN pauses p ON p.scope = '*' OR p.scope = c.topic
WHERE c.committed > p.paused AND (p.lifted IS NULL OR c.committed < p.lifted)
ORDER BY c.committed`

// LateClaims returns every claim that committed after a pause of its scope
// had committed and before that pause was lifted.
func LateClaims(ctx context.Context, db DB) ([]Late, error) {
	rows, err := db.Query(ctx, lateSQL)
	if err != nil {
		return nil, fmt.Errorf("claimwitness: late claims: %w", err)
	}
	defer rows.Close()
	var out []Late
	for rows.Next() {
		var l Late
		if err := rows.Scan(&l.JobID, &l.Topic, &l.Scope, &l.Version, &l.PauseCommit, &l.ClaimCommit); err != nil {
			return nil, fmt.Errorf("claimwitness: late claims: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// Counts says how much the witness saw: claims recorded, and pause events
// whose commit time is known.
func Counts(ctx context.Context, db DB) (claims, pauses int64, err error) {
	err = db.QueryRow(ctx, `
SELECT (SELECT count(*) FROM pulse_claim_witness),
       (SELECT count(*) FROM control_events WHERE action = 'pause' AND pg_xact_commit_timestamp(xmin) IS NOT NULL)`).Scan(&claims, &pauses)
	if err != nil {
		err = fmt.Errorf("claimwitness: counts: %w", err)
	}
	return claims, pauses, err
}

// Claim is one recorded claim.
type Claim struct {
	JobID     string
	Attempt   int
	LockedBy  string
	Committed time.Time
}

// Claims returns every recorded claim, oldest commit first.
func Claims(ctx context.Context, db DB) ([]Claim, error) {
	rows, err := db.Query(ctx, `
SELECT job_id::text, attempt, locked_by, pg_xact_commit_timestamp((xid % 4294967296)::text::xid)
FROM pulse_claim_witness ORDER BY 4`)
	if err != nil {
		return nil, fmt.Errorf("claimwitness: claims: %w", err)
	}
	defer rows.Close()
	var out []Claim
	for rows.Next() {
		var c Claim
		if err := rows.Scan(&c.JobID, &c.Attempt, &c.LockedBy, &c.Committed); err != nil {
			return nil, fmt.Errorf("claimwitness: claims: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
