package jobstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// BreakerActor is the actor of the pauses and limits the circuit breaker
// sets (dispatch_control, control_events, topic_limits).
const BreakerActor = "breaker"

// BreakerState is where a topic's circuit breaker stands (ADR-0053).
type BreakerState string

// The breaker states.
const (
	// BreakerClosed: the topic runs; the breaker counts its outcomes.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen: the breaker paused the topic until its cooldown ends.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen: the cooldown ended; the topic runs one attempt at a
	// time (max_running 1) until the first outcome closes or reopens it.
	BreakerHalfOpen BreakerState = "half_open"
)

// The bounds of a breaker's settings (topic_breakers' CHECKs hold the same).
const (
	MinBreakerWindow    = time.Minute
	MaxBreakerWindow    = 24 * time.Hour
	MinBreakerCooldown  = time.Second
	MaxBreakerCooldown  = 24 * time.Hour
	MaxBreakerMinVolume = 1000000
)

// BreakerConfig is a topic's breaker: it opens when, of at least MinVolume
// attempts settled within Window, the failed share reaches FailureRatio,
// and stays open for Cooldown.
type BreakerConfig struct {
	FailureRatio float64
	Window       time.Duration
	MinVolume    int
	Cooldown     time.Duration
}

// Validate checks c, naming the field.
func (c BreakerConfig) Validate() error {
	switch {
	case math.IsNaN(c.FailureRatio) || c.FailureRatio <= 0 || c.FailureRatio > 1:
		return apierr.Invalid("failure_ratio", "is %v; it must be above 0 and at most 1", c.FailureRatio)
	case c.Window < MinBreakerWindow || c.Window > MaxBreakerWindow:
		return apierr.Invalid("window", "is %s; it must be between %s and %s", c.Window, MinBreakerWindow, MaxBreakerWindow)
	case c.Window%time.Minute != 0:
		return apierr.Invalid("window", "is %s; it must be whole minutes (outcomes are counted per minute)", c.Window)
	case c.MinVolume < 1 || c.MinVolume > MaxBreakerMinVolume:
		return apierr.Invalid("min_volume", "is %d; it must be between 1 and %d", c.MinVolume, MaxBreakerMinVolume)
	case c.Cooldown < MinBreakerCooldown || c.Cooldown > MaxBreakerCooldown:
		return apierr.Invalid("cooldown", "is %s; it must be between %s and %s", c.Cooldown, MinBreakerCooldown, MaxBreakerCooldown)
	case c.Cooldown%time.Microsecond != 0:
		return apierr.Invalid("cooldown", "is %s; it must be whole microseconds", c.Cooldown)
	}
	return nil
}

// Breaker is a topic's breaker: its settings and where it stands.
type Breaker struct {
	Topic string
	BreakerConfig
	State BreakerState
	// OpenedAt is when it last opened; OpenUntil when that opening's
	// pause ends (the cooldown).
	OpenedAt  *time.Time
	OpenUntil *time.Time
	// Opens counts its openings.
	Opens     int64
	UpdatedAt time.Time
	UpdatedBy string
}

const breakerColumns = `topic, failure_ratio, (extract(epoch FROM window_length) * 1000000)::bigint,
       min_volume, (extract(epoch FROM cooldown) * 1000000)::bigint, state, opened_at, open_until, opens,
       updated_at, updated_by`

func scanBreaker(row rowScanner) (Breaker, error) {
	var b Breaker
	var window, cooldown int64
	var state string
	err := row.Scan(&b.Topic, &b.FailureRatio, &window, &b.MinVolume, &cooldown, &state, &b.OpenedAt, &b.OpenUntil,
		&b.Opens, &b.UpdatedAt, &b.UpdatedBy)
	b.Window, b.Cooldown = time.Duration(window)*time.Microsecond, time.Duration(cooldown)*time.Microsecond
	b.State = BreakerState(state)
	return b, err
}

// Breakers reads every topic's breaker, by topic.
func (s *Store) Breakers(ctx context.Context) ([]Breaker, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+breakerColumns+` FROM topic_breakers ORDER BY topic`)
	if err != nil {
		return nil, interpretError("read breakers", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Breaker, error) { return scanBreaker(r) })
	if err != nil {
		return nil, interpretError("read breakers", err)
	}
	return out, nil
}

// TopicBreaker reads topic's breaker; ok is false when it has none.
func (s *Store) TopicBreaker(ctx context.Context, topic string) (b Breaker, ok bool, err error) {
	b, err = scanBreaker(s.pool.QueryRow(ctx, `SELECT `+breakerColumns+` FROM topic_breakers WHERE topic = $1`, topic))
	if errors.Is(err, pgx.ErrNoRows) {
		return Breaker{}, false, nil
	}
	if err != nil {
		return Breaker{}, false, interpretError("read breaker", err)
	}
	return b, true, nil
}

// setBreakerSQL writes a topic's breaker settings. A new breaker starts
// closed, counting from now; changing one keeps its state.
const setBreakerSQL = `
INSERT INTO topic_breakers AS b (topic, failure_ratio, window_length, min_volume, cooldown, updated_by,
                                 since_at, base_completed, base_failed)
SELECT $1, $2, $3 * interval '1 microsecond', $4, $5 * interval '1 microsecond', $6, now(), c.completed, c.failed
FROM (` + minuteCountsSQL + `) AS c
ON CONFLICT (topic) DO UPDATE
SET failure_ratio = EXCLUDED.failure_ratio, window_length = EXCLUDED.window_length,
    min_volume = EXCLUDED.min_volume, cooldown = EXCLUDED.cooldown,
    updated_by = EXCLUDED.updated_by, updated_at = now()
RETURNING ` + breakerColumns

// minuteCountsSQL sums the current minute's counts of topic $1: the
// baseline a breaker counts from when it starts counting now.
const minuteCountsSQL = `
SELECT COALESCE(sum(completed), 0)::bigint AS completed, COALESCE(sum(failed), 0)::bigint AS failed
FROM job_throughput WHERE topic = $1 AND bucket = date_trunc('minute', now(), 'UTC')`

// SetTopicBreaker sets topic's breaker, as actor, and returns it.
// Callers validate the topic's format first (jobspec.ValidateTopic).
func (s *Store) SetTopicBreaker(ctx context.Context, topic string, c BreakerConfig, actor string) (Breaker, error) {
	if err := storable.Text("topic", topic); err != nil {
		return Breaker{}, err
	}
	if err := c.Validate(); err != nil {
		return Breaker{}, err
	}
	if err := storable.Text("actor", actor); err != nil {
		return Breaker{}, err
	}
	if actor == "" {
		return Breaker{}, apierr.Invalid("actor", "is required: say who sets the breaker")
	}
	b, err := scanBreaker(s.pool.QueryRow(ctx, setBreakerSQL, topic, c.FailureRatio, c.Window.Microseconds(),
		c.MinVolume, c.Cooldown.Microseconds(), actor))
	if err != nil {
		return Breaker{}, interpretError("set breaker", err)
	}
	return b, nil
}

// ClearTopicBreaker removes topic's breaker. One that is open or half-open
// lets go first: its pause is resumed (as actor) and the topic's limit
// restored. ok is false when the topic had none.
func (s *Store) ClearTopicBreaker(ctx context.Context, topic, actor string) (ok bool, err error) {
	err = s.controlTx(ctx, "clear breaker", func(tx pgx.Tx) error {
		row, found, err := lockBreaker(ctx, tx, topic)
		if err != nil || !found {
			return err
		}
		ok = true
		if err := letGo(ctx, tx, row, actor); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM topic_breakers WHERE topic = $1`, topic)
		return err
	})
	return ok, err
}

// breakerRow is what a breaker's evaluation reads under its row lock.
type breakerRow struct {
	Breaker
	limitSaved bool
	savedLimit *int32
	// Counted: attempts settled since the breaker started counting, within
	// its window.
	completed, failed int64
	// cooled: the open breaker's cooldown has ended (the database's clock).
	cooled bool
}

// lockBreakerSQL reads a breaker under its row lock, with the attempts
// of its topic settled within its window and since since_at: whole
// minutes from the later of the two, minus since_at's minute's counts
// when since_at set them (base_*).
const lockBreakerSQL = `
WITH b AS (
    SELECT *, GREATEST(date_trunc('minute', now() - window_length, 'UTC'), date_trunc('minute', since_at, 'UTC')) AS start
    FROM topic_breakers WHERE topic = $1 FOR UPDATE
), c AS (
    SELECT COALESCE(sum(t.completed), 0)::bigint AS completed, COALESCE(sum(t.failed), 0)::bigint AS failed
    FROM job_throughput t, b WHERE t.topic = b.topic AND t.bucket >= b.start
)
SELECT ` + breakerColumns + `, limit_saved, saved_max_running,
       GREATEST(c.completed - CASE WHEN b.start = date_trunc('minute', b.since_at, 'UTC') THEN b.base_completed ELSE 0 END, 0),
       GREATEST(c.failed - CASE WHEN b.start = date_trunc('minute', b.since_at, 'UTC') THEN b.base_failed ELSE 0 END, 0),
       COALESCE(b.open_until <= now(), false)
FROM b, c`

func lockBreaker(ctx context.Context, tx pgx.Tx, topic string) (breakerRow, bool, error) {
	var r breakerRow
	var window, cooldown int64
	var state string
	err := tx.QueryRow(ctx, lockBreakerSQL, topic).Scan(&r.Topic, &r.FailureRatio, &window, &r.MinVolume, &cooldown, &state,
		&r.OpenedAt, &r.OpenUntil, &r.Opens, &r.UpdatedAt, &r.UpdatedBy, &r.limitSaved, &r.savedLimit, &r.completed, &r.failed, &r.cooled)
	if errors.Is(err, pgx.ErrNoRows) {
		return breakerRow{}, false, nil
	}
	r.Window, r.Cooldown = time.Duration(window)*time.Microsecond, time.Duration(cooldown)*time.Microsecond
	r.State = BreakerState(state)
	return r, err == nil, err
}

// BreakerTransition is one change of a breaker's state.
type BreakerTransition struct {
	Topic string
	From  BreakerState
	To    BreakerState
	// Why says what decided it ("12 of 20 attempts failed ...", "the
	// cooldown ended", "operator ops resumed the topic").
	Why string
}

// EvaluateBreakers runs one evaluation of every breaker (the reaper's
// breaker loop) and returns the transitions it made. Each breaker is
// decided in its own transaction under its row lock and the pause lock,
// so any number of reapers may evaluate at once: each transition happens
// once.
func (s *Store) EvaluateBreakers(ctx context.Context) ([]BreakerTransition, error) {
	rows, err := s.pool.Query(ctx, `SELECT topic FROM topic_breakers ORDER BY topic`)
	if err != nil {
		return nil, interpretError("evaluate breakers", err)
	}
	topics, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError("evaluate breakers", err)
	}
	var out []BreakerTransition
	for _, topic := range topics {
		var tr *BreakerTransition
		err := s.controlTx(ctx, "evaluate breaker", func(tx pgx.Tx) error {
			var err error
			tr, err = evaluateBreaker(ctx, tx, topic)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("breaker of %s: %w", topic, err)
		}
		if tr != nil {
			out = append(out, *tr)
		}
	}
	return out, nil
}

// evaluateBreaker decides one breaker, in tx (which holds the pause lock).
func evaluateBreaker(ctx context.Context, tx pgx.Tx, topic string) (*BreakerTransition, error) {
	b, found, err := lockBreaker(ctx, tx, topic)
	if err != nil || !found {
		return nil, err
	}
	scope, _, err := scopeInTx(ctx, tx, topic)
	if err != nil {
		return nil, err
	}
	tr := func(to BreakerState, why string) *BreakerTransition {
		return &BreakerTransition{Topic: topic, From: b.State, To: to, Why: why}
	}
	switch b.State {
	case BreakerClosed:
		if scope.Paused {
			return nil, nil // someone paused it: nothing runs, nothing to judge
		}
		total := b.completed + b.failed
		if total < int64(b.MinVolume) || float64(b.failed) < b.FailureRatio*float64(total) {
			return nil, nil
		}
		why := fmt.Sprintf("breaker: %d of %d attempts failed (%.0f%%, threshold %.0f%%) within %s", b.failed, total,
			100*float64(b.failed)/float64(total), 100*b.FailureRatio, b.Window)
		return tr(BreakerOpen, why), open(ctx, tx, b, why)
	case BreakerOpen:
		switch {
		case scope.Paused && scope.Actor == BreakerActor:
			if b.cooled {
				// The cooldown ended and no control-api resumed it yet.
				if _, err := tx.Exec(ctx, resumeSQL, topic, BreakerActor); err != nil {
					return nil, err
				}
				return tr(BreakerHalfOpen, "the cooldown ended"), halfOpen(ctx, tx, topic)
			}
			return nil, nil
		case !scope.Paused && (scope.Actor == SystemActor || scope.Actor == BreakerActor):
			return tr(BreakerHalfOpen, "the cooldown ended"), halfOpen(ctx, tx, topic)
		default:
			why := scope.Actor + " changed the topic's pause"
			return tr(BreakerClosed, why), closeBreaker(ctx, tx, b)
		}
	case BreakerHalfOpen:
		switch {
		case scope.Paused:
			why := scope.Actor + " paused the topic"
			return tr(BreakerClosed, why), closeBreaker(ctx, tx, b)
		case b.failed > 0:
			why := fmt.Sprintf("breaker: the half-open trial failed (%d of %d attempts since the cooldown)", b.failed, b.failed+b.completed)
			return tr(BreakerOpen, why), open(ctx, tx, b, why)
		case b.completed > 0:
			return tr(BreakerClosed, "the half-open trial completed"), closeBreaker(ctx, tx, b)
		}
	}
	return nil, nil
}

// open pauses the topic as the breaker until the cooldown ends, and sets
// its trial limit (max_running 1, saving the limit it had) for when the
// pause ends.
func open(ctx context.Context, tx pgx.Tx, b breakerRow, reason string) error {
	if len(reason) > 500 {
		reason = reason[:500]
	}
	if _, err := tx.Exec(ctx, pauseBarrierSQL); err != nil {
		return err
	}
	var until time.Time
	if err := tx.QueryRow(ctx, `SELECT now() + cooldown FROM topic_breakers WHERE topic = $1`, b.Topic).Scan(&until); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, pauseSQL, b.Topic, string(PauseDrain), reason, BreakerActor, until); err != nil {
		return err
	}
	if !b.limitSaved {
		var cur *int32
		err := tx.QueryRow(ctx, `SELECT max_running FROM topic_limits WHERE topic = $1`, b.Topic).Scan(&cur)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			cur = nil
		case err != nil:
			return err
		}
		if cur == nil || *cur > 1 {
			if _, err := tx.Exec(ctx, setTopicLimitSQL, b.Topic, int32(1), BreakerActor); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE topic_breakers SET limit_saved = true, saved_max_running = $2 WHERE topic = $1`,
				b.Topic, cur); err != nil {
				return err
			}
		}
	}
	_, err := tx.Exec(ctx, `
UPDATE topic_breakers SET state = 'open', opened_at = now(), open_until = $2, opens = opens + 1
WHERE topic = $1`, b.Topic, until)
	return err
}

// halfOpen starts the trial: outcomes count from now.
func halfOpen(ctx context.Context, tx pgx.Tx, topic string) error {
	_, err := tx.Exec(ctx, `
UPDATE topic_breakers b SET state = 'half_open', since_at = now(), base_completed = c.completed, base_failed = c.failed
FROM (`+minuteCountsSQL+`) AS c WHERE b.topic = $1`, topic)
	return err
}

// closeBreaker restores the topic's limit and counts afresh from now.
func closeBreaker(ctx context.Context, tx pgx.Tx, b breakerRow) error {
	if err := restoreLimit(ctx, tx, b); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `
UPDATE topic_breakers b SET state = 'closed', since_at = now(), base_completed = c.completed, base_failed = c.failed,
    open_until = NULL
FROM (`+minuteCountsSQL+`) AS c WHERE b.topic = $1`, b.Topic)
	return err
}

// restoreLimit puts back the limit the breaker saved, unless someone set
// the topic's limit since.
func restoreLimit(ctx context.Context, tx pgx.Tx, b breakerRow) error {
	if !b.limitSaved {
		return nil
	}
	var by string
	err := tx.QueryRow(ctx, `SELECT updated_by FROM topic_limits WHERE topic = $1`, b.Topic).Scan(&by)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if by == BreakerActor {
		if _, err := tx.Exec(ctx, setTopicLimitSQL, b.Topic, b.savedLimit, BreakerActor); err != nil {
			return err
		}
	}
	_, err = tx.Exec(ctx, `UPDATE topic_breakers SET limit_saved = false, saved_max_running = NULL WHERE topic = $1`, b.Topic)
	return err
}

// letGo undoes what an open or half-open breaker holds: its pause and its
// trial limit.
func letGo(ctx context.Context, tx pgx.Tx, b breakerRow, actor string) error {
	scope, _, err := scopeInTx(ctx, tx, b.Topic)
	if err != nil {
		return err
	}
	if scope.Paused && scope.Actor == BreakerActor {
		if _, err := tx.Exec(ctx, resumeSQL, b.Topic, actor); err != nil {
			return err
		}
	}
	return restoreLimit(ctx, tx, b)
}
