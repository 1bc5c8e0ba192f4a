package jobstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
	// RateLimit is the topic's fleet-wide limit on starts per interval
	// (ADR-0051); nil: none.
	RateLimit *pulsetype.RateLimit
	// MaxRunningPerKey is the fleet-wide limit on RUNNING jobs per
	// concurrency key (ADR-0054); nil: none.
	MaxRunningPerKey *int
	// SequenceOnFailure is the topic's sequence policy
	// (pulsetype.SequenceBlock or SequenceContinue); empty: the topic
	// takes no sequenced jobs.
	SequenceOnFailure string
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
    SELECT topic, max_running, updated_by, updated_at, rate_limit,
           (extract(epoch FROM rate_interval) * 1000000)::bigint AS rate_interval_us, rate_key,
           max_running_per_key, sequence_on_failure
    FROM topic_limits
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
       COALESCE(w.n, 0)::int,
       l.rate_limit, l.rate_interval_us, l.rate_key,
       l.max_running_per_key, COALESCE(l.sequence_on_failure, '')
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
		var limit, rate *int32
		var rateMicros *int64
		var rateKey *string
		var perKey *int32
		if err := rows.Scan(&t.Topic, &t.Pending, &t.Running, &t.Retrying, &t.DeadLettered,
			&t.CompletedLastHour, &t.FailedLastHour, &oldestMicros, &limit, &t.LimitUpdatedBy, &t.LimitUpdatedAt,
			&t.Paused, &t.ConnectedWorkers, &rate, &rateMicros, &rateKey, &perKey, &t.SequenceOnFailure); err != nil {
			return nil, interpretError("read topics", err)
		}
		if rate != nil && rateMicros != nil && rateKey != nil {
			t.RateLimit = &pulsetype.RateLimit{Limit: int(*rate), Interval: time.Duration(*rateMicros) * time.Microsecond,
				Key: *rateKey}
		}
		if perKey != nil {
			n := int(*perKey)
			t.MaxRunningPerKey = &n
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

// setTopicLimitSQL sets a topic's limit, or clears it ($2 NULL): the row
// goes when the topic keeps no other limit (a rate limit keeps it). A raised
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
), cleared AS (
    UPDATE topic_limits SET max_running = NULL, updated_by = $3, updated_at = now()
    WHERE topic = $1 AND $2::int IS NULL
      AND (rate_limit IS NOT NULL OR max_running_per_key IS NOT NULL OR sequence_on_failure IS NOT NULL)
    RETURNING max_running
), deleted AS (
    DELETE FROM topic_limits WHERE topic = $1 AND $2::int IS NULL
      AND rate_limit IS NULL AND max_running_per_key IS NULL AND sequence_on_failure IS NULL
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

// setTopicRateLimitSQL sets a topic's rate limit ($2 rate_limit,
// $3 rate_interval, $4 rate_key source), or clears it ($2 NULL): the row
// goes when the topic keeps no other limit, and a cleared limit's sliding
// log with it. Every change wakes every gateway (pulse_jobs_ready, payload
// the topic and " limits"), so a gateway sleeping the topic until its
// window opens claims it again under the new limit.
const setTopicRateLimitSQL = `
WITH upserted AS (
    INSERT INTO topic_limits (topic, max_running, rate_limit, rate_interval, rate_key, updated_by, updated_at)
    SELECT $1, NULL, $2, $3::interval, $4, $5, now() WHERE $2::int IS NOT NULL
    ON CONFLICT (topic) DO UPDATE
    SET rate_limit = EXCLUDED.rate_limit, rate_interval = EXCLUDED.rate_interval, rate_key = EXCLUDED.rate_key,
        updated_by = EXCLUDED.updated_by, updated_at = EXCLUDED.updated_at
    RETURNING topic
), cleared AS (
    UPDATE topic_limits SET rate_limit = NULL, rate_interval = NULL, rate_key = NULL, updated_by = $5, updated_at = now()
    WHERE topic = $1 AND $2::int IS NULL
      AND (max_running IS NOT NULL OR max_running_per_key IS NOT NULL OR sequence_on_failure IS NOT NULL)
    RETURNING topic
), deleted AS (
    DELETE FROM topic_limits WHERE topic = $1 AND $2::int IS NULL
      AND max_running IS NULL AND max_running_per_key IS NULL AND sequence_on_failure IS NULL
    RETURNING topic
), forgotten AS (
    DELETE FROM topic_rate_log WHERE topic = $1 AND $2::int IS NULL
)
SELECT pg_notify('` + ReadyChannel + `', $1 || '` + RateLimitsChanged + `')`

// RateLimitsChanged ends the payload of the pulse_jobs_ready notification
// a rate limit change sends ("<topic> limits"): a space, which no topic
// holds, so a listener tells it from a topic's jobs becoming ready.
const RateLimitsChanged = " limits"

// NewJobsReady ends the payload of the pulse_jobs_ready notification an
// insert sends when its jobs are new ("<topic> new", migration 00020,
// ADR-0055): its transaction began moments before, so they sort after
// every claim cursor less ClaimSkewMargin, and a claim resuming after its
// cursor finds them. Every other notification of the channel may be of
// jobs sorting before a cursor (a released child, a retried job).
const NewJobsReady = " new"

// SubmittedReady joins a topic and its jobs' submitted_at in the payload
// of the pulse_jobs_ready notification an insert's wake sends after its
// commit ("<topic> at <microseconds since the epoch>", migration 00024,
// ADR-0063). The jobs are visible when it arrives, and they sort at that
// time: a gateway whose claims resume after a later job finds them from
// there instead of waiting for a rescan.
const SubmittedReady = " at "

// ReadyAt splits a SubmittedReady payload into its topic and time; ok is
// false for any other payload.
func ReadyAt(payload string) (topic string, at time.Time, ok bool) {
	topic, micros, ok := strings.Cut(payload, SubmittedReady)
	if !ok {
		return "", time.Time{}, false
	}
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	return topic, time.UnixMicro(us), true
}

// ValidateRateLimit checks a rate limit as the schema will, with errors
// naming the field (rate_limit, rate_interval, rate_key).
func ValidateRateLimit(rl pulsetype.RateLimit) error {
	if rl.Limit < 1 || rl.Limit > pulsetype.MaxRateLimit {
		return apierr.Invalid("rate_limit", "is %d; it must be between 1 and %d starts per interval", rl.Limit, pulsetype.MaxRateLimit)
	}
	if rl.Interval < pulsetype.MinRateInterval || rl.Interval > pulsetype.MaxRateInterval {
		return apierr.Invalid("rate_interval", "is %s; it must be between %s and %s", rl.Interval, pulsetype.MinRateInterval, pulsetype.MaxRateInterval)
	}
	if rl.Interval%pulsetype.DurationResolution != 0 {
		return apierr.Invalid("rate_interval", "is %s; it must be a whole number of microseconds", rl.Interval)
	}
	if err := storable.Text("rate_key", rl.Key); err != nil {
		return err
	}
	switch {
	case rl.Key == pulsetype.RateKeyNone || rl.Key == pulsetype.RateKeyJob:
	case strings.HasPrefix(rl.Key, pulsetype.RateKeyArgsPrefix):
		field := strings.TrimPrefix(rl.Key, pulsetype.RateKeyArgsPrefix)
		if field == "" || utf8.RuneCountInString(field) > pulsetype.MaxRateKeyFieldChars {
			return apierr.Invalid("rate_key", "names the args field %q; a field name is 1..%d characters", field, pulsetype.MaxRateKeyFieldChars)
		}
	default:
		return apierr.Invalid("rate_key", "is %q; it must be %q, %q or %q and an args field name", rl.Key,
			pulsetype.RateKeyNone, pulsetype.RateKeyJob, pulsetype.RateKeyArgsPrefix)
	}
	return nil
}

// SetTopicRateLimit sets topic's fleet-wide rate limit to *rl, or clears
// it (nil), as actor, and returns the topic's numbers after the change.
// Asking for the limit the topic already has writes nothing.
//
// A change is exact as SetTopicLimit's is (ADR-0017): it takes the pause
// barrier exclusively, so every claim either committed under the old
// limit or sees the new one. The sliding log stays: a lowered limit or a
// longer interval counts the starts already made.
func (s *Store) SetTopicRateLimit(ctx context.Context, topic string, rl *pulsetype.RateLimit, actor string) (TopicInfo, error) {
	if err := storable.Text("topic", topic); err != nil {
		return TopicInfo{}, err
	}
	if topic == "" {
		return TopicInfo{}, apierr.Invalid("topic", "is required")
	}
	if rl != nil {
		if err := ValidateRateLimit(*rl); err != nil {
			return TopicInfo{}, err
		}
	}
	if err := storable.Text("actor", actor); err != nil {
		return TopicInfo{}, err
	}
	if actor == "" {
		return TopicInfo{}, apierr.Invalid("actor", "is required: say who sets the limit")
	}
	var limit *int32
	var interval, key *string
	if rl != nil {
		n, iv := int32(rl.Limit), intervalOf(rl.Interval)
		limit, interval, key = &n, &iv, &rl.Key
	}
	err := s.controlTx(ctx, "set topic rate limit", func(tx pgx.Tx) error {
		var curLimit *int32
		var curMicros *int64
		var curKey *string
		err := tx.QueryRow(ctx, `SELECT rate_limit, (extract(epoch FROM rate_interval) * 1000000)::bigint, rate_key
			FROM topic_limits WHERE topic = $1`, topic).Scan(&curLimit, &curMicros, &curKey)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if curLimit == nil && rl == nil {
			return nil // no rate limit, as asked
		}
		if curLimit != nil && rl != nil && int(*curLimit) == rl.Limit && *curMicros == rl.Interval.Microseconds() && *curKey == rl.Key {
			return nil // the limit it already has
		}
		if _, err := tx.Exec(ctx, pauseBarrierSQL); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, setTopicRateLimitSQL, topic, limit, interval, key, actor)
		return err
	})
	if err != nil {
		return TopicInfo{}, err
	}
	return s.Topic(ctx, topic)
}
