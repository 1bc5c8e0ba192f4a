package jobstore

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// WaitReason says why a claimable-in-principle job is not running.
type WaitReason string

// The wait reasons, most decisive first.
const (
	// WaitPaused: its scope (global or its topic) is paused.
	WaitPaused WaitReason = "paused"
	// WaitBreakerOpen: its topic's circuit breaker paused it (ADR-0050)
	// until NotBefore, the end of the cooldown.
	WaitBreakerOpen WaitReason = "breaker_open"
	// WaitScheduled: a PENDING job whose run_at is still ahead.
	WaitScheduled WaitReason = "scheduled"
	// WaitRetryBackoff: a RETRYING job waiting out its backoff.
	WaitRetryBackoff WaitReason = "retry_backoff"
	// WaitSnoozed: a PENDING job its handler snoozed (pulse.Snooze),
	// until NotBefore. Only a snooze makes a PENDING job with snoozes
	// (an operator retry resets them).
	WaitSnoozed WaitReason = "snoozed"
	// WaitRateLimited: due, but its topic's rate limit has no room left
	// for its key in the window (ADR-0051); NotBefore is when the window
	// next frees a start of that key.
	WaitRateLimited WaitReason = "rate_limited"
	// WaitConcurrencyKeyFull: due, but its concurrency key has its topic's
	// max_running_per_key RUNNING (ADR-0054).
	WaitConcurrencyKeyFull WaitReason = "concurrency_key_full"
	// WaitSequenceBlocked: due, but a job of its sequence before it is
	// unfinished, or one of its sequence runs (ADR-0054): BlockedBy.
	WaitSequenceBlocked WaitReason = "sequence_blocked"
	// WaitNoWorker: due, but no connected worker serves its topic
	// (worker_presence); WorkerLastSeen says when one last did.
	WaitNoWorker WaitReason = "no_worker"
	// WaitQueued: due and dispatchable, behind Ahead jobs of its topic.
	WaitQueued WaitReason = "queued"
)

// WaitAheadScanLimit bounds the "ahead" count: it counts at most this many
// jobs of the job's topic per priority band (higher, and equal but older).
const WaitAheadScanLimit = 100000

// JobWait explains why a PENDING or RETRYING job is not running.
type JobWait struct {
	Reason WaitReason
	// PausedBy is the paused scope holding the job (Reason paused).
	PausedBy *ScopeState
	// NotBefore is when the job becomes due, when that is still ahead.
	NotBefore *time.Time
	// Ahead counts the due jobs of its topic the claim takes before it:
	// higher priority, or equal priority and submitted earlier.
	Ahead int64
	// AheadAtLeast says the count stopped at its bound: at least Ahead
	// jobs are ahead.
	AheadAtLeast bool
	// WorkerLastSeen is, for Reason no_worker, when a worker serving the
	// topic was last connected; nil when none ever was.
	WorkerLastSeen *time.Time
	// BlockedBy is, for Reason sequence_blocked, the job of its sequence
	// it waits for.
	BlockedBy *uuid.UUID
	// MaxRunningPerKey is, for Reason concurrency_key_full, its topic's
	// cap per key.
	MaxRunningPerKey int
}

// jobAheadSQL counts the due jobs of topic $1 that precede a job of
// priority $2 submitted at ($3, $4) in claim order. Each branch is a range
// of jobs_claim_idx (priority above; same priority and earlier), walked in
// order; the topic filter is inside each branch, so its LIMIT bounds jobs
// of this topic, never jobs of others. A branch that reaches its bound
// makes the count a lower bound. The walk skips other topics' jobs in the
// range as it goes (jobs_claim_idx does not hold the topic), so its cost
// grows with the due jobs of every topic ahead of this one, like the
// status counts (docs/pause.md), while the count stays exact up to $5 per
// band.
const jobAheadSQL = `
WITH higher AS (
    SELECT 1 FROM jobs
    WHERE status IN ('PENDING', 'RETRYING') AND blocked_by = 0 AND next_run_at <= now() AND priority > $2
      AND topic = $1
    ORDER BY priority DESC, submitted_at, id LIMIT $5
), earlier AS (
    SELECT 1 FROM jobs
    WHERE status IN ('PENDING', 'RETRYING') AND blocked_by = 0 AND next_run_at <= now()
      AND priority = $2 AND (submitted_at, id) < ($3, $4)
      AND topic = $1
    ORDER BY priority DESC, submitted_at, id LIMIT $5
)
SELECT now(), h.n + e.n, h.n >= $5 OR e.n >= $5
FROM (SELECT count(*) AS n FROM higher) AS h, (SELECT count(*) AS n FROM earlier) AS e`

// ExplainWait says why job is not running; nil for a job that is running
// or finished.
func (s *Store) ExplainWait(ctx context.Context, job *Job) (*JobWait, error) {
	if job.Status != pulsetype.StatusPending && job.Status != pulsetype.StatusRetrying {
		return nil, nil
	}
	st, err := s.DispatchState(ctx)
	if err != nil {
		return nil, err
	}
	var now time.Time
	w := &JobWait{}
	err = s.queryPinned(ctx, jobAheadSQL,
		[]any{job.Topic, job.Priority, job.SubmittedAt, job.ID, WaitAheadScanLimit},
		func(rows pgx.Rows) error { return rows.Scan(&now, &w.Ahead, &w.AheadAtLeast) })
	if err != nil {
		return nil, interpretError("explain wait", err)
	}
	if job.NextRunAt.After(now) {
		t := job.NextRunAt
		w.NotBefore = &t
	}
	switch blocking, paused := st.Blocking(job.Topic); {
	case paused && blocking.Scope == job.Topic && blocking.Actor == BreakerActor:
		// The breaker's pause: until its cooldown ends, or the job's own
		// run_at when that is later.
		w.Reason, w.PausedBy = WaitBreakerOpen, &blocking
		if blocking.Until != nil && (w.NotBefore == nil || blocking.Until.After(*w.NotBefore)) {
			t := *blocking.Until
			w.NotBefore = &t
		}
	case paused:
		w.Reason, w.PausedBy = WaitPaused, &blocking
	case w.NotBefore != nil && job.Status == pulsetype.StatusRetrying:
		w.Reason = WaitRetryBackoff
	case w.NotBefore != nil && job.Snoozes > 0:
		w.Reason = WaitSnoozed
	case w.NotBefore != nil:
		w.Reason = WaitScheduled
	default:
		blockedBy, perKey, full, err := s.keyedWait(ctx, job)
		if err != nil {
			return nil, err
		}
		switch {
		case blockedBy != nil:
			w.Reason, w.BlockedBy = WaitSequenceBlocked, blockedBy
			return w, nil
		case full:
			w.Reason, w.MaxRunningPerKey = WaitConcurrencyKeyFull, perKey
			return w, nil
		}
		until, limited, err := s.rateLimitedJob(ctx, job)
		if err != nil {
			return nil, err
		}
		if limited {
			w.Reason, w.NotBefore = WaitRateLimited, &until
			return w, nil
		}
		served, lastSeen, err := s.TopicPresence(ctx, job.Topic)
		if err != nil {
			return nil, err
		}
		if served {
			w.Reason = WaitQueued
		} else {
			w.Reason, w.WorkerLastSeen = WaitNoWorker, lastSeen
		}
	}
	return w, nil
}

// jobRateLimitSQL reads whether job $2's key has room under topic $1's
// rate limit: the key's starts in the window, the limit, and when the
// window frees the key's next start (its oldest start in the window plus
// the interval). No row: the topic has no rate limit.
const jobRateLimitSQL = `
WITH k AS (
    SELECT l.rate_limit, l.rate_interval,
           CASE WHEN l.rate_key = 'none' THEN '' ELSE COALESCE((SELECT rate_key FROM jobs WHERE id = $2), '') END AS key
    FROM topic_limits AS l WHERE l.topic = $1 AND l.rate_limit IS NOT NULL
)
SELECT count(g.started_at) >= k.rate_limit, min(g.started_at) + k.rate_interval
FROM k LEFT JOIN topic_rate_log AS g
  ON g.topic = $1 AND g.key = k.key AND g.started_at > statement_timestamp() - k.rate_interval
GROUP BY k.rate_limit, k.rate_interval`

// rateLimitedJob reports whether job waits for its topic's rate limit,
// and until when.
func (s *Store) rateLimitedJob(ctx context.Context, job *Job) (time.Time, bool, error) {
	var full bool
	var until *time.Time
	err := s.pool.QueryRow(ctx, jobRateLimitSQL, job.Topic, job.ID).Scan(&full, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, interpretError("explain wait", err)
	}
	if !full || until == nil {
		return time.Time{}, false, nil
	}
	return *until, true, nil
}

// jobKeyWaitSQL reads, for job $1 of a keyed topic (ADR-0054), the job of
// its sequence it waits for (as the claim's sequenceFreeSQL decides: an
// earlier one unfinished — dead-lettered counts only under 'block' — or
// one running), its topic's cap per key, and how many jobs of its
// concurrency key run. No row: its topic is not keyed.
const jobKeyWaitSQL = `
WITH j AS (
    SELECT id, topic, concurrency_key, sequence_key, sequence_pos FROM jobs WHERE id = $1
), l AS (
    SELECT k.max_running_per_key, k.sequence_on_failure
    FROM topic_limits AS k, j
    WHERE k.topic = j.topic AND (k.max_running_per_key IS NOT NULL OR k.sequence_on_failure IS NOT NULL)
)
SELECT (SELECT p.id FROM jobs AS p
        WHERE j.sequence_key IS NOT NULL AND p.topic = j.topic AND p.sequence_key IS NOT NULL
          AND p.sequence_key COLLATE "C" = j.sequence_key COLLATE "C" AND p.id <> j.id
          AND p.status IN ('PENDING', 'RETRYING', 'RUNNING', 'DEAD_LETTERED')
          AND (p.status = 'RUNNING'
               OR (p.sequence_pos < j.sequence_pos AND (p.status <> 'DEAD_LETTERED' OR l.sequence_on_failure = 'block')))
        ORDER BY p.status = 'RUNNING' DESC, p.sequence_pos LIMIT 1),
       COALESCE(l.max_running_per_key, 0),
       (SELECT count(*) FROM jobs AS r
        WHERE j.concurrency_key IS NOT NULL AND l.max_running_per_key IS NOT NULL
          AND r.topic = j.topic AND r.concurrency_key = j.concurrency_key AND r.status = 'RUNNING')
FROM j, l`

// keyedWait reports whether job waits for its sequence (the job it waits
// for) or for room under its concurrency key's cap.
func (s *Store) keyedWait(ctx context.Context, job *Job) (*uuid.UUID, int, bool, error) {
	var blockedBy *uuid.UUID
	var perKey int32
	var running int64
	err := s.pool.QueryRow(ctx, jobKeyWaitSQL, job.ID).Scan(&blockedBy, &perKey, &running)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, interpretError("explain wait", err)
	}
	return blockedBy, int(perKey), perKey > 0 && running >= int64(perKey), nil
}
