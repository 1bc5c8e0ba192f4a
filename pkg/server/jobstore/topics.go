package jobstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// TopicInfo is one topic's live numbers and its limit, as ListTopics and
// the dashboard show them.
type TopicInfo struct {
	Topic string
	// Live jobs by status, and the dead-lettered ones waiting for an
	// operator.
	Pending, Running, Retrying, DeadLettered int64
	// Attempts that completed, and attempts that failed (retried or dead
	// lettered), in the last hour, summed over every writer of
	// job_throughput.
	CompletedLastHour, FailedLastHour int64
	// OldestPendingAge is how long the longest-waiting due PENDING or
	// RETRYING job has waited since it became due (its next_run_at); nil
	// when none is due.
	OldestPendingAge *time.Duration
	// MaxRunning is the fleet-wide limit on RUNNING jobs; nil: none.
	MaxRunning *int
	// Who set the limit and when; empty and nil without a limit.
	LimitUpdatedBy string
	LimitUpdatedAt *time.Time
	// Paused is true while the topic or the global scope is paused.
	Paused bool
	// ConnectedWorkers counts the live worker streams serving the topic,
	// across every gateway (worker_presence).
	ConnectedWorkers int
}

// topicsPlanSQL is countsPlanSQL: the counts walk the partial indexes of
// live and dead-lettered jobs, never the table, whatever the statistics
// say, and JIT stays out of one aggregate.
const topicsPlanSQL = countsPlanSQL

// topicsSQL reads every topic that has live or dead-lettered jobs, a
// limit, a pause, a connected worker or throughput in the last hour ($1
// NULL), or one topic ($1). It stays on pgx rather than bun (ADR-0014): it
// needs the plan settings of topicsPlanSQL in its transaction.
//
// Cost: pending and retrying walk jobs_claim_idx, running
// jobs_expired_lease_idx, dead-lettered jobs_dead_lettered_topic_idx
// (migration 00009) — O(live + dead-lettered), never the finished jobs
// retention keeps; the other tables hold a row per topic, worker or
// minute.
const topicsSQL = `
WITH queued AS (
    SELECT topic,
           count(*) FILTER (WHERE status = 'PENDING') AS pending,
           count(*) FILTER (WHERE status = 'RETRYING') AS retrying,
           min(next_run_at) FILTER (WHERE next_run_at <= now()) AS oldest_due
    FROM jobs
    WHERE status IN ('PENDING', 'RETRYING') AND blocked_by = 0 AND ($1::text IS NULL OR topic = $1)
    GROUP BY topic
), running AS (
    SELECT topic, count(*) AS n FROM jobs
    WHERE status = 'RUNNING' AND ($1::text IS NULL OR topic = $1)
    GROUP BY topic
), dead AS (
    SELECT topic, count(*) AS n FROM jobs
    WHERE status = 'DEAD_LETTERED' AND ($1::text IS NULL OR topic = $1)
    GROUP BY topic
), workers AS (
    SELECT t AS topic, count(*) AS n
    FROM worker_presence, unnest(topics) AS t
    WHERE expires_at > now() AND ($1::text IS NULL OR t = $1)
    GROUP BY t
), throughput AS (
    SELECT topic, sum(completed) AS completed, sum(failed) AS failed
    FROM job_throughput
    WHERE bucket > now() - interval '1 hour' AND ($1::text IS NULL OR topic = $1)
    GROUP BY topic
), limits AS (
    SELECT topic, max_running, updated_by, updated_at FROM topic_limits
    WHERE $1::text IS NULL OR topic = $1
), paused AS (
    SELECT scope FROM dispatch_control WHERE paused
), names AS (
    SELECT topic FROM queued
    UNION SELECT topic FROM running
    UNION SELECT topic FROM dead
    UNION SELECT topic FROM workers
    UNION SELECT topic FROM throughput
    UNION SELECT topic FROM limits
    UNION SELECT scope FROM paused WHERE scope <> '` + GlobalScope + `' AND ($1::text IS NULL OR scope = $1)
    UNION SELECT $1::text WHERE $1::text IS NOT NULL
)
SELECT n.topic,
       COALESCE(q.pending, 0), COALESCE(r.n, 0), COALESCE(q.retrying, 0), COALESCE(d.n, 0),
       COALESCE(tp.completed, 0)::bigint, COALESCE(tp.failed, 0)::bigint,
       (extract(epoch FROM now() - q.oldest_due) * 1000000)::bigint,
       l.max_running, COALESCE(l.updated_by, ''), l.updated_at,
       EXISTS (SELECT 1 FROM paused WHERE scope IN ('` + GlobalScope + `', n.topic)),
       COALESCE(w.n, 0)::int
FROM names AS n
LEFT JOIN queued AS q USING (topic)
LEFT JOIN running AS r USING (topic)
LEFT JOIN dead AS d USING (topic)
LEFT JOIN workers AS w USING (topic)
LEFT JOIN throughput AS tp USING (topic)
LEFT JOIN limits AS l USING (topic)
ORDER BY n.topic`

// Topics returns every topic that has live or dead-lettered jobs, a limit,
// a pause, a connected worker or throughput in the last hour, by name.
func (s *Store) Topics(ctx context.Context) ([]TopicInfo, error) {
	return s.topics(ctx, nil)
}

// Topic returns one topic's numbers; a topic nothing knows of reads as
// zeros, with no limit.
func (s *Store) Topic(ctx context.Context, topic string) (TopicInfo, error) {
	if err := storable.Text("topic", topic); err != nil {
		return TopicInfo{}, err
	}
	out, err := s.topics(ctx, &topic)
	if err != nil {
		return TopicInfo{}, err
	}
	if len(out) != 1 {
		return TopicInfo{}, errors.New("read topic: expected one row")
	}
	return out[0], nil
}

func (s *Store) topics(ctx context.Context, topic *string) ([]TopicInfo, error) {
	b := &pgx.Batch{}
	b.Queue(topicsPlanSQL)
	b.Queue(topicsSQL, topic)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, interpretError("read topics", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, interpretError("read topics", err)
	}
	defer rows.Close()
	var out []TopicInfo
	for rows.Next() {
		var t TopicInfo
		var oldestMicros *int64
		var limit *int32
		if err := rows.Scan(&t.Topic, &t.Pending, &t.Running, &t.Retrying, &t.DeadLettered,
			&t.CompletedLastHour, &t.FailedLastHour, &oldestMicros, &limit, &t.LimitUpdatedBy, &t.LimitUpdatedAt,
			&t.Paused, &t.ConnectedWorkers); err != nil {
			return nil, interpretError("read topics", err)
		}
		if oldestMicros != nil {
			age := time.Duration(max(*oldestMicros, 0)) * time.Microsecond
			t.OldestPendingAge = &age
		}
		if limit != nil {
			n := int(*limit)
			t.MaxRunning = &n
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("read topics", err)
	}
	return out, nil
}

// setTopicLimitSQL sets a topic's limit, or clears it ($2 NULL). A raised
// or cleared limit wakes every gateway (pulse_jobs_ready, on commit), so
// the jobs it allows start at the next claim, not at the next poll.
const setTopicLimitSQL = `
WITH old AS (
    SELECT max_running FROM topic_limits WHERE topic = $1
), upserted AS (
    INSERT INTO topic_limits (topic, max_running, updated_by, updated_at)
    SELECT $1, $2, $3, now() WHERE $2::int IS NOT NULL
    ON CONFLICT (topic) DO UPDATE
    SET max_running = EXCLUDED.max_running, updated_by = EXCLUDED.updated_by, updated_at = EXCLUDED.updated_at
    RETURNING max_running
), deleted AS (
    DELETE FROM topic_limits WHERE topic = $1 AND $2::int IS NULL
    RETURNING max_running
)
SELECT pg_notify('` + ReadyChannel + `', $1)
FROM old
WHERE $2::int IS NULL OR $2::int > old.max_running`

// SetTopicLimit sets topic's fleet-wide limit on RUNNING jobs to
// *maxRunning (0 … MaxTopicLimit), or clears it (nil), as actor, and
// returns the topic's numbers after the change. Asking for the limit the
// topic already has writes nothing (and keeps who set it).
//
// A change is exact against every claim on every gateway (ADR-0017): it
// takes the pause barrier exclusively before it writes, so it waits for
// the claims in flight to commit (a few milliseconds) and holds new ones
// until it commits; a claim therefore either committed before the change
// or sees it. Lowering a limit below what runs stops no running job: the
// topic starts nothing until its running jobs fall below the new limit.
//
// Callers validate the topic's format first (jobspec.ValidateTopic; the
// API does); the schema's CHECK refuses what they miss, naming the topic.
func (s *Store) SetTopicLimit(ctx context.Context, topic string, maxRunning *int, actor string) (TopicInfo, error) {
	if err := storable.Text("topic", topic); err != nil {
		return TopicInfo{}, err
	}
	if topic == "" {
		return TopicInfo{}, apierr.Invalid("topic", "is required")
	}
	if maxRunning != nil && (*maxRunning < 0 || *maxRunning > pulsetype.MaxTopicLimit) {
		return TopicInfo{}, apierr.Invalid("max_running", "is %d; it must be between 0 and %d, or null to clear the limit",
			*maxRunning, pulsetype.MaxTopicLimit)
	}
	if err := storable.Text("actor", actor); err != nil {
		return TopicInfo{}, err
	}
	if actor == "" {
		return TopicInfo{}, apierr.Invalid("actor", "is required: say who sets the limit")
	}
	var limit *int32
	if maxRunning != nil {
		n := int32(*maxRunning)
		limit = &n
	}
	err := s.controlTx(ctx, "set topic limit", func(tx pgx.Tx) error {
		var cur *int32
		err := tx.QueryRow(ctx, `SELECT max_running FROM topic_limits WHERE topic = $1`, topic).Scan(&cur)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if (cur == nil && limit == nil) || (cur != nil && limit != nil && *cur == *limit) {
			return nil // the limit it already has
		}
		// Wait out the claims in flight and hold back new ones until this
		// commits: no claim decides under the old limit after the new one
		// is in force.
		if _, err := tx.Exec(ctx, pauseBarrierSQL); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, setTopicLimitSQL, topic, limit, actor)
		return err
	})
	if err != nil {
		return TopicInfo{}, err
	}
	return s.Topic(ctx, topic)
}
