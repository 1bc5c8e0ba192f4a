package jobstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Worker presence (migration 00006, ADR-0012): each dispatch-gateway keeps
// one worker_presence row per worker id it streams to, so any replica and
// control-api can tell which topics have a connected worker and which
// identity a worker id streams as.

// Presence is one stream as a gateway records it.
type Presence struct {
	// WorkerID is the id the worker opened its stream with.
	WorkerID string
	// Principal is the authenticated identity the stream was opened as.
	Principal string
	// Topics are the topics the stream serves; topic names never contain
	// a space (jobspec), which is how they travel to Postgres.
	Topics []string
	// ConnectedAt is what OpenPresence returned for this stream: the
	// row's own mark, which a close must present to delete it.
	ConnectedAt time.Time
}

// Left names a closed stream's row: its worker id and the ConnectedAt its
// open returned.
type Left struct {
	WorkerID    string
	ConnectedAt time.Time
}

// openPresenceSQL claims a worker id for a principal as its stream opens.
// A row of the same principal (a reconnect, possibly racing its old
// stream) or an expired row of anyone is taken over; a live row of another
// principal makes the upsert update nothing, which is how an open under a
// second identity is refused on every gateway: the conflict on the primary
// key serialises concurrent opens of one worker id. connected_at is
// clock_timestamp(), so each open marks the row as its own.
const openPresenceSQL = `
INSERT INTO worker_presence AS p (worker_id, principal, gateway, topics, connected_at, last_seen, expires_at)
VALUES ($1, $2, $3, string_to_array($4, ' '), clock_timestamp(), now(), now() + $5::interval)
ON CONFLICT (worker_id) DO UPDATE
SET principal    = EXCLUDED.principal,
    gateway      = EXCLUDED.gateway,
    topics       = EXCLUDED.topics,
    connected_at = EXCLUDED.connected_at,
    last_seen    = EXCLUDED.last_seen,
    expires_at   = EXCLUDED.expires_at
WHERE p.principal = EXCLUDED.principal OR p.expires_at <= now()
RETURNING p.connected_at`

// OpenPresence records a stream as it opens and returns the row's
// connected_at mark. A worker id that a live row holds for another
// principal is refused with AlreadyExists, naming the worker id (never the
// other identity).
func (s *Store) OpenPresence(ctx context.Context, gateway string, p Presence, ttl time.Duration) (time.Time, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, openPresenceSQL, p.WorkerID, p.Principal, gateway,
		strings.Join(p.Topics, " "), intervalOf(ttl)).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, &apierr.Error{Kind: apierr.KindAlreadyExists,
			Msg: "worker id " + strconv.Quote(p.WorkerID) + " is already streaming under another identity; choose another worker id"}
	}
	if err != nil {
		return time.Time{}, interpretError("open presence", err)
	}
	return at, nil
}

// refreshPresenceSQL extends every row a gateway holds, in one statement:
// rows that vanished (a racing close, an expired row swept) come back, and
// a row another principal took over after it expired is left alone and not
// returned. Updates touch no indexed column, so with the table's fillfactor
// they are HOT.
const refreshPresenceSQL = `
INSERT INTO worker_presence AS p (worker_id, principal, gateway, topics, connected_at, last_seen, expires_at)
SELECT e.worker_id, e.principal, $1, string_to_array(e.topics, ' '), e.connected_at, now(), now() + $6::interval
FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[]) AS e(worker_id, principal, topics, connected_at)
ON CONFLICT (worker_id) DO UPDATE
SET principal    = EXCLUDED.principal,
    gateway      = EXCLUDED.gateway,
    topics       = EXCLUDED.topics,
    connected_at = CASE WHEN p.principal = EXCLUDED.principal THEN p.connected_at ELSE EXCLUDED.connected_at END,
    last_seen    = EXCLUDED.last_seen,
    expires_at   = EXCLUDED.expires_at
WHERE p.principal = EXCLUDED.principal OR p.expires_at <= now()
RETURNING p.worker_id`

// sweepPresenceSQL deletes up to $1 expired rows (their gateway stopped
// refreshing them) and records when their topics were last served. SKIP
// LOCKED lets every gateway sweep at once without waiting on each other.
const sweepPresenceSQL = `
WITH gone AS (
    DELETE FROM worker_presence AS p
    WHERE p.worker_id IN (
        SELECT worker_id FROM worker_presence
        WHERE expires_at <= now()
        ORDER BY expires_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED)
      AND p.expires_at <= now()
    RETURNING p.topics, p.last_seen
), seen AS (
    INSERT INTO worker_topic_seen AS s (topic, last_seen)
    SELECT t, max(gone.last_seen) FROM gone, unnest(gone.topics) AS t GROUP BY t ORDER BY t
    ON CONFLICT (topic) DO UPDATE SET last_seen = GREATEST(s.last_seen, EXCLUDED.last_seen)
)
SELECT count(*) FROM gone`

// RefreshPresence extends the rows of every stream a gateway holds
// (entries, one per worker id) and sweeps up to sweep expired rows of any
// gateway, in one round trip. It returns the worker ids it refreshed: an
// entry missing from them lost its worker id to another identity after its
// row expired. swept counts the expired rows deleted.
func (s *Store) RefreshPresence(ctx context.Context, gateway string, entries []Presence, ttl time.Duration, sweep int) (kept map[string]bool, swept int, err error) {
	n := len(entries)
	ids, principals, topics := make([]string, n), make([]string, n), make([]string, n)
	since := make([]time.Time, n)
	for i, e := range entries {
		ids[i], principals[i], topics[i], since[i] = e.WorkerID, e.Principal, strings.Join(e.Topics, " "), e.ConnectedAt
	}
	b := &pgx.Batch{}
	if n > 0 {
		b.Queue(refreshPresenceSQL, gateway, ids, principals, topics, since, intervalOf(ttl))
	}
	b.Queue(sweepPresenceSQL, sweep)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	kept = make(map[string]bool, n)
	if n > 0 {
		rows, err := br.Query()
		if err != nil {
			return nil, 0, interpretError("refresh presence", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, 0, interpretError("refresh presence", err)
			}
			kept[id] = true
		}
		if err := rows.Err(); err != nil {
			return nil, 0, interpretError("refresh presence", err)
		}
	}
	if err := br.QueryRow().Scan(&swept); err != nil {
		return nil, 0, interpretError("sweep presence", err)
	}
	return kept, swept, nil
}

// leavePresenceSQL deletes the rows of closed streams, each only while it
// still carries its own stream's connected_at (a reconnect that opened
// since owns the row now), and records that their topics were served until
// now.
const leavePresenceSQL = `
WITH gone AS (
    DELETE FROM worker_presence AS p
    USING unnest($1::text[], $2::timestamptz[]) AS l(worker_id, connected_at)
    WHERE p.worker_id = l.worker_id AND p.connected_at = l.connected_at
    RETURNING p.topics
)
INSERT INTO worker_topic_seen AS s (topic, last_seen)
SELECT DISTINCT t, now() FROM gone, unnest(gone.topics) AS t ORDER BY t
ON CONFLICT (topic) DO UPDATE SET last_seen = GREATEST(s.last_seen, EXCLUDED.last_seen)`

// LeavePresence deletes the rows of streams that closed, in one statement.
func (s *Store) LeavePresence(ctx context.Context, left []Left) error {
	if len(left) == 0 {
		return nil
	}
	ids, since := make([]string, len(left)), make([]time.Time, len(left))
	for i, l := range left {
		ids[i], since[i] = l.WorkerID, l.ConnectedAt
	}
	_, err := s.pool.Exec(ctx, leavePresenceSQL, ids, since)
	return interpretError("leave presence", err)
}

// topicPresenceSQL says whether a live row serves topic $1, and when a
// worker last served it: the newest refresh of any row naming it (expired
// ones included, until swept) or the moment the last one left.
const topicPresenceSQL = `
SELECT EXISTS (SELECT 1 FROM worker_presence WHERE topics @> ARRAY[$1::text] AND expires_at > now()),
       GREATEST((SELECT max(last_seen) FROM worker_presence WHERE topics @> ARRAY[$1::text]),
                (SELECT last_seen FROM worker_topic_seen WHERE topic = $1))`

// TopicPresence reports whether a connected worker serves topic and when
// one last did (nil: never, as far as the table remembers).
func (s *Store) TopicPresence(ctx context.Context, topic string) (served bool, lastSeen *time.Time, err error) {
	if err := s.pool.QueryRow(ctx, topicPresenceSQL, topic).Scan(&served, &lastSeen); err != nil {
		return false, nil, interpretError("topic presence", err)
	}
	return served, lastSeen, nil
}
