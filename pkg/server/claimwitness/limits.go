package claimwitness

import (
	"context"
	"fmt"
	"time"
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
// Rate limits (ADR-0051) are judged on the same commits: each start of a
// rate-limited topic is recorded in commit order with its key (none when
// the topic is limited as a whole), its started_at and the limit, and with
// the most starts of its key, among every start recorded so far, in any
// window of rate_interval that holds it. A window over the limit holds
// more than rate_limit starts; at the commit of the last of them to be
// recorded, the window beginning at its earliest start holds all of them
// and holds that start, so the count recorded then is over the limit:
// every breach is caught at some commit, whatever order claims of
// different timestamps commit in, and a start within the limit is never
// reported. The record is the witness's own (started_at as each claim set
// it), not the claim's sliding log, so a claim that forgot to log a start
// is still judged.
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
CREATE TABLE IF NOT EXISTS pulse_rate_witness (
    seq           bigserial PRIMARY KEY, -- commit order: written under the witness lock
    xid           bigint      NOT NULL DEFAULT txid_current(),
    topic         text        NOT NULL,
    job_id        uuid        NOT NULL,
    key           text        NOT NULL,
    started_at    timestamptz NOT NULL,
    rate_limit    integer     NOT NULL,
    rate_interval interval    NOT NULL,
    window_max    bigint
);
CREATE INDEX IF NOT EXISTS pulse_rate_witness_window ON pulse_rate_witness (topic, key, started_at);
CREATE OR REPLACE FUNCTION pulse_limit_witness_record() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    rated bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(2003399790, 0); -- 0x7769746e, "witn"
    INSERT INTO pulse_rate_witness (topic, job_id, key, started_at, rate_limit, rate_interval)
    SELECT NEW.topic, NEW.id, CASE WHEN l.rate_key = 'none' THEN '' ELSE COALESCE(NEW.rate_key, '') END,
           NEW.started_at, l.rate_limit, l.rate_interval
    FROM topic_limits AS l WHERE l.topic = NEW.topic AND l.rate_limit IS NOT NULL
    RETURNING seq INTO rated;
    IF rated IS NOT NULL THEN
        -- The fullest window of rate_interval holding this start, over
        -- every start recorded so far: the fullest window begins at a
        -- start, so look at the windows beginning at each start of the
        -- key in (started_at - rate_interval, started_at].
        UPDATE pulse_rate_witness AS w SET window_max = (
            SELECT max((SELECT count(*) FROM pulse_rate_witness AS o
                        WHERE o.topic = w.topic AND o.key = w.key
                          AND o.started_at >= a.started_at AND o.started_at < a.started_at + w.rate_interval))
            FROM pulse_rate_witness AS a
            WHERE a.topic = w.topic AND a.key = w.key
              AND a.started_at > w.started_at - w.rate_interval AND a.started_at <= w.started_at)
        WHERE w.seq = rated;
    END IF;
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

// RateStart is one start of a job of a rate-limited topic, judged at its
// claim's commit: WindowMax is the most starts of its key (empty when the
// topic is limited as a whole) in any window of RateInterval holding it,
// among the starts committed up to and with it.
type RateStart struct {
	Seq          int64
	Xid          int64
	Topic        string
	Key          string
	StartedAt    time.Time
	RateLimit    int
	RateInterval time.Duration
	WindowMax    int64
}

// Violation says what the start broke, or "" when nothing.
func (r RateStart) Violation() string {
	if r.WindowMax > int64(r.RateLimit) {
		return fmt.Sprintf("transaction %d started a job of %s (key %q) at %s with %d starts of the key in a window of %s; the limit is %d",
			r.Xid, r.Topic, r.Key, r.StartedAt.Format(time.RFC3339Nano), r.WindowMax, r.RateInterval, r.RateLimit)
	}
	return ""
}

// RateStarts returns every start of a rate-limited topic since
// InstallLimits, in commit order.
func RateStarts(ctx context.Context, db DB) ([]RateStart, error) {
	rows, err := db.Query(ctx, `
SELECT seq, xid, topic, key, started_at, rate_limit,
       (extract(epoch FROM rate_interval) * 1000000)::bigint, window_max
FROM pulse_rate_witness ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("claimwitness: rate starts: %w", err)
	}
	defer rows.Close()
	var out []RateStart
	for rows.Next() {
		var r RateStart
		var micros int64
		if err := rows.Scan(&r.Seq, &r.Xid, &r.Topic, &r.Key, &r.StartedAt, &r.RateLimit, &micros, &r.WindowMax); err != nil {
			return nil, fmt.Errorf("claimwitness: rate starts: %w", err)
		}
		r.RateInterval = time.Duration(micros) * time.Microsecond
		out = append(out, r)
	}
	return out, rows.Err()
}
