package jobstore

import (
	"context"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// The tables beside jobs that would otherwise grow forever, pruned by the
// reaper in bounded batches like the job retention (retention.go): expired
// worker_presence rows (a gateway sweeps them too, but only while one
// runs), worker_topic_seen rows of topics no worker has served for long,
// and the pause audit (control_events) past its retention.

// AuditRetentionFloor is the youngest control_events row the schema lets
// anyone delete (control_events_append_only, migrations/00001_baseline.sql); the reaper refuses a shorter
// PULSE_AUDIT_RETENTION.
const AuditRetentionFloor = 24 * time.Hour

// deleteTopicSeenSQL removes at most $2 worker_topic_seen rows whose topic
// no worker has served for $1. The table holds one row per topic ever
// served; it has no index on last_seen, and needs none: the scan stops at
// the LIMIT-th old row, and a pruned table holds only the topics of the
// retention window. A topic a live stream serves is kept whatever its
// row says (its row is rewritten when the stream leaves).
const deleteTopicSeenSQL = `
DELETE FROM worker_topic_seen AS s
WHERE s.topic IN (
        SELECT topic FROM worker_topic_seen
        WHERE last_seen < now() - $1::interval
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
  AND s.last_seen < now() - $1::interval
  AND NOT EXISTS (SELECT 1 FROM worker_presence p
                  WHERE p.topics @> ARRAY[s.topic] AND p.expires_at > now())`

// DeleteTopicSeen deletes up to limit worker_topic_seen rows of topics no
// worker has served for olderThan, and returns how many it deleted; a
// count below limit means nothing more is due now. Afterwards a job of
// such a topic is explained as waiting for a worker that never came.
func (s *Store) DeleteTopicSeen(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	if err := pruneArgs(olderThan, limit); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, deleteTopicSeenSQL, intervalOf(olderThan), limit)
	if err != nil {
		return 0, interpretError("delete worker_topic_seen", err)
	}
	return tag.RowsAffected(), nil
}

// SweepPresence deletes up to limit expired worker_presence rows (their
// gateway stopped refreshing them) and records when their topics were
// last served: the gateways' sweep (sweepPresenceSQL), run by the reaper
// too so the rows of a fleet whose gateways are all gone do not stay.
func (s *Store) SweepPresence(ctx context.Context, limit int) (int64, error) {
	if limit < 1 {
		return 0, apierr.Invalid("limit", "must be at least 1, got %d", limit)
	}
	var n int64
	if err := s.pool.QueryRow(ctx, sweepPresenceSQL, limit).Scan(&n); err != nil {
		return 0, interpretError("sweep presence", err)
	}
	return n, nil
}

// deleteControlEventsSQL removes at most $2 control_events rows older than
// $1, oldest first along the primary key (ids grow with time), so a batch
// stops at the first young row it meets.
const deleteControlEventsSQL = `
DELETE FROM control_events
WHERE id = ANY (ARRAY(
        SELECT id FROM control_events
        WHERE at < now() - $1::interval
        ORDER BY id
        LIMIT $2
        FOR UPDATE SKIP LOCKED))
  AND at < now() - $1::interval`

// DeleteControlEvents deletes up to limit rows of the pause audit older
// than olderThan (at least AuditRetentionFloor, which the schema enforces
// too) and returns how many it deleted.
func (s *Store) DeleteControlEvents(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	if err := pruneArgs(olderThan, limit); err != nil {
		return 0, err
	}
	if olderThan < AuditRetentionFloor {
		return 0, apierr.Invalid("older_than", "is %s; the audit keeps every row for at least %s", olderThan, AuditRetentionFloor)
	}
	tag, err := s.pool.Exec(ctx, deleteControlEventsSQL, intervalOf(olderThan), limit)
	if err != nil {
		return 0, interpretError("delete control_events", err)
	}
	return tag.RowsAffected(), nil
}

func pruneArgs(olderThan time.Duration, limit int) error {
	switch {
	case olderThan <= 0:
		return apierr.Invalid("older_than", "must be positive, got %s", olderThan)
	case limit < 1:
		return apierr.Invalid("limit", "must be at least 1, got %d", limit)
	}
	return nil
}
