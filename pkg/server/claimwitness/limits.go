package claimwitness

import (
	"context"
	"fmt"
)

// The limit witness judges topic limits (ADR-0017) at each claim's
// commit: a deferred constraint trigger runs as the claiming transaction
// commits, takes one advisory lock that every claim's witness takes (so
// claims commit one at a time, in the order their witnesses ran), and
// records, per topic the transaction claimed, how many jobs of the topic
// are RUNNING — its own claims and every claim committed before it — and
// the limit in force. A transaction's locks are released after its commit
// is visible, so each witness sees every claim that committed before it.
// Jobs that leave RUNNING only lower the count, so the recorded count is
// at least the true count at the commit: a claim that broke the limit is
// always caught, and a correct one never is.
//
// It is for tests: it serialises the commits of every claim in the
// database and runs a count per claimed topic.

const installLimitsSQL = `
CREATE TABLE IF NOT EXISTS pulse_limit_witness (
    xid         bigint  NOT NULL DEFAULT txid_current(),
    topic       text    NOT NULL,
    running     bigint  NOT NULL,
    max_running integer,
    PRIMARY KEY (xid, topic)
);
CREATE TABLE IF NOT EXISTS pulse_key_witness (
    seq                 bigserial PRIMARY KEY, -- commit order: written under the witness lock
    xid                 bigint  NOT NULL DEFAULT txid_current(),
    topic               text    NOT NULL,
    job_id              uuid    NOT NULL,
    concurrency_key     text,
    key_running         bigint  NOT NULL,
    max_running_per_key integer,
    sequence_key        text,
    sequence_running    bigint  NOT NULL,
    sequence_earlier    bigint  NOT NULL
);
CREATE OR REPLACE FUNCTION pulse_limit_witness_record() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(2003399790, 0); -- 0x7769746e, "witn"
    IF NEW.concurrency_key IS NOT NULL OR NEW.sequence_key IS NOT NULL THEN
        INSERT INTO pulse_key_witness (topic, job_id, concurrency_key, key_running, max_running_per_key,
                                       sequence_key, sequence_running, sequence_earlier)
        SELECT NEW.topic, NEW.id, NEW.concurrency_key,
               (SELECT count(*) FROM jobs WHERE topic = NEW.topic AND concurrency_key = NEW.concurrency_key AND status = 'RUNNING'),
               l.max_running_per_key, NEW.sequence_key,
               (SELECT count(*) FROM jobs WHERE topic = NEW.topic AND sequence_key = NEW.sequence_key AND status = 'RUNNING'),
               (SELECT count(*) FROM jobs AS j
                WHERE j.topic = NEW.topic AND j.sequence_key = NEW.sequence_key AND j.sequence_pos < NEW.sequence_pos
                  AND (j.status IN ('PENDING', 'RETRYING') OR (j.status = 'DEAD_LETTERED' AND l.sequence_on_failure = 'block')))
        FROM (SELECT NULL) AS one LEFT JOIN topic_limits AS l ON l.topic = NEW.topic;
    END IF;
    IF EXISTS (SELECT 1 FROM pulse_limit_witness WHERE xid = txid_current() AND topic = NEW.topic) THEN
        RETURN NULL;
    END IF;
    INSERT INTO pulse_limit_witness (topic, running, max_running)
    SELECT NEW.topic,
           (SELECT count(*) FROM jobs WHERE topic = NEW.topic AND status = 'RUNNING'),
           (SELECT max_running FROM topic_limits WHERE topic = NEW.topic);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS pulse_limit_witness ON jobs;
CREATE CONSTRAINT TRIGGER pulse_limit_witness
    AFTER UPDATE ON jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING')
    EXECUTE FUNCTION pulse_limit_witness_record();`

// InstallLimits records, from now on, the running count and limit of each
// topic at every claim's commit.
func InstallLimits(ctx context.Context, db DB) error {
	if _, err := db.Exec(ctx, installLimitsSQL); err != nil {
		return fmt.Errorf("claimwitness: install limits: %w", err)
	}
	return nil
}

// OverLimit is a claim whose commit left more jobs of its topic RUNNING
// than the topic's limit.
type OverLimit struct {
	Topic      string
	Xid        int64
	Running    int64
	MaxRunning int
}

func (o OverLimit) String() string {
	return fmt.Sprintf("transaction %d left %d jobs of %s running over its limit of %d", o.Xid, o.Running, o.Topic, o.MaxRunning)
}

// OverLimits returns every claim that committed with its topic over its
// limit.
func OverLimits(ctx context.Context, db DB) ([]OverLimit, error) {
	rows, err := db.Query(ctx, `
SELECT topic, xid, running, max_running FROM pulse_limit_witness
WHERE running > max_running ORDER BY xid`)
	if err != nil {
		return nil, fmt.Errorf("claimwitness: over limits: %w", err)
	}
	defer rows.Close()
	var out []OverLimit
	for rows.Next() {
		var o OverLimit
		if err := rows.Scan(&o.Topic, &o.Xid, &o.Running, &o.MaxRunning); err != nil {
			return nil, fmt.Errorf("claimwitness: over limits: %w", err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// LimitedClaims says how many claim transactions took jobs of topic while
// it had a limit, and the most jobs of it they left running: a test that
// never reached its limit proved nothing.
func LimitedClaims(ctx context.Context, db DB, topic string) (claims, maxRunning int64, err error) {
	err = db.QueryRow(ctx, `
SELECT count(*), COALESCE(max(running), 0) FROM pulse_limit_witness
WHERE topic = $1 AND max_running IS NOT NULL`, topic).Scan(&claims, &maxRunning)
	if err != nil {
		err = fmt.Errorf("claimwitness: limited claims: %w", err)
	}
	return claims, maxRunning, err
}

// KeyStart is one start of a keyed job as judged at its claim's commit
// (ADR-0054): how many jobs of its concurrency key and of its sequence
// were RUNNING then, the cap in force, and how many jobs of its sequence
// submitted before it were still unfinished. Seq orders starts by commit.
type KeyStart struct {
	Seq              int64
	Xid              int64
	Topic            string
	ConcurrencyKey   string
	KeyRunning       int64
	MaxRunningPerKey *int
	SequenceKey      string
	SequenceRunning  int64
	SequenceEarlier  int64
}

// Violation says what the start broke, or "" when nothing.
func (k KeyStart) Violation() string {
	switch {
	case k.ConcurrencyKey != "" && k.MaxRunningPerKey != nil && k.KeyRunning > int64(*k.MaxRunningPerKey):
		return fmt.Sprintf("transaction %d left %d jobs of key %q of %s running over its cap of %d", k.Xid, k.KeyRunning, k.ConcurrencyKey, k.Topic, *k.MaxRunningPerKey)
	case k.SequenceKey != "" && k.SequenceRunning > 1:
		return fmt.Sprintf("transaction %d left %d jobs of sequence %q of %s running", k.Xid, k.SequenceRunning, k.SequenceKey, k.Topic)
	case k.SequenceKey != "" && k.SequenceEarlier > 0:
		return fmt.Sprintf("transaction %d started a job of sequence %q of %s with %d earlier jobs unfinished", k.Xid, k.SequenceKey, k.Topic, k.SequenceEarlier)
	}
	return ""
}

// KeyStarts returns every start of a keyed job since InstallLimits, in
// commit order.
func KeyStarts(ctx context.Context, db DB) ([]KeyStart, error) {
	rows, err := db.Query(ctx, `
SELECT seq, xid, topic, COALESCE(concurrency_key, ''), key_running, max_running_per_key,
       COALESCE(sequence_key, ''), sequence_running, sequence_earlier
FROM pulse_key_witness ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("claimwitness: key starts: %w", err)
	}
	defer rows.Close()
	var out []KeyStart
	for rows.Next() {
		var k KeyStart
		if err := rows.Scan(&k.Seq, &k.Xid, &k.Topic, &k.ConcurrencyKey, &k.KeyRunning, &k.MaxRunningPerKey,
			&k.SequenceKey, &k.SequenceRunning, &k.SequenceEarlier); err != nil {
			return nil, fmt.Errorf("claimwitness: key starts: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
