package jobstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// KeyLimits are a topic's per-key limits (ADR-0054).
type KeyLimits struct {
	// MaxRunningPerKey caps the topic's RUNNING jobs per concurrency key,
	// fleet-wide, 1..pulsetype.MaxRunningPerKey; nil: no cap.
	MaxRunningPerKey *int
	// SequenceOnFailure is the topic's sequence policy,
	// pulsetype.SequenceBlock or SequenceContinue; empty: none (the topic
	// takes no sequenced jobs).
	SequenceOnFailure string
}

// setTopicKeyLimitsSQL writes a topic's per-key limits ($2
// max_running_per_key, $3 sequence_on_failure; both NULL clears them):
// the row goes when the topic keeps no other limit. Every change wakes
// every gateway (pulse_jobs_ready), so the jobs a raised or cleared limit
// allows start at the next claim.
const setTopicKeyLimitsSQL = `
WITH upserted AS (
    INSERT INTO topic_limits (topic, max_running, max_running_per_key, sequence_on_failure, updated_by, updated_at)
    SELECT $1, NULL, $2, $3, $4, now() WHERE $2::int IS NOT NULL OR $3::text IS NOT NULL
    ON CONFLICT (topic) DO UPDATE
    SET max_running_per_key = EXCLUDED.max_running_per_key, sequence_on_failure = EXCLUDED.sequence_on_failure,
        updated_by = EXCLUDED.updated_by, updated_at = EXCLUDED.updated_at
    RETURNING topic
), cleared AS (
    UPDATE topic_limits SET max_running_per_key = NULL, sequence_on_failure = NULL, updated_by = $4, updated_at = now()
    WHERE topic = $1 AND $2::int IS NULL AND $3::text IS NULL
      AND (max_running IS NOT NULL OR rate_limit IS NOT NULL)
    RETURNING topic
), deleted AS (
    DELETE FROM topic_limits WHERE topic = $1 AND $2::int IS NULL AND $3::text IS NULL
      AND max_running IS NULL AND rate_limit IS NULL
    RETURNING topic
), forgotten AS (
    DELETE FROM topic_key_cursors WHERE topic = $1 AND $2::int IS NULL AND $3::text IS NULL
)
SELECT pg_notify('` + ReadyChannel + `', $1)`

// ValidateKeyLimits checks per-key limits as the schema will, with errors
// naming the field.
func ValidateKeyLimits(kl KeyLimits) error {
	if kl.MaxRunningPerKey != nil && (*kl.MaxRunningPerKey < 1 || *kl.MaxRunningPerKey > pulsetype.MaxRunningPerKey) {
		return apierr.Invalid("max_running_per_key", "is %d; it must be between 1 and %d, or null for no cap",
			*kl.MaxRunningPerKey, pulsetype.MaxRunningPerKey)
	}
	switch kl.SequenceOnFailure {
	case "", pulsetype.SequenceBlock, pulsetype.SequenceContinue:
	default:
		if err := storable.Text("sequence_on_failure", kl.SequenceOnFailure); err != nil {
			return err
		}
		return apierr.Invalid("sequence_on_failure", "is %q; it must be %q, %q, or empty for no sequences",
			kl.SequenceOnFailure, pulsetype.SequenceBlock, pulsetype.SequenceContinue)
	}
	return nil
}

// SetTopicKeyLimits sets topic's per-key limits to kl, as actor, and
// returns the topic's numbers after the change. Asking for what the topic
// already has writes nothing.
//
// A change is exact as SetTopicLimit's is (ADR-0017): it takes the pause
// barrier exclusively, so every claim either committed under the old
// limits or sees the new ones. A topic cannot have per-key limits and a
// rate limit at once (topic_limits_keys_or_rate), and its sequence policy
// cannot be cleared while sequenced jobs of it are queued or running (a
// sequenced submit reads the policy FOR SHARE, so none slips in between).
func (s *Store) SetTopicKeyLimits(ctx context.Context, topic string, kl KeyLimits, actor string) (TopicInfo, error) {
	if err := storable.Text("topic", topic); err != nil {
		return TopicInfo{}, err
	}
	if topic == "" {
		return TopicInfo{}, apierr.Invalid("topic", "is required")
	}
	if err := ValidateKeyLimits(kl); err != nil {
		return TopicInfo{}, err
	}
	if err := storable.Text("actor", actor); err != nil {
		return TopicInfo{}, err
	}
	if actor == "" {
		return TopicInfo{}, apierr.Invalid("actor", "is required: say who sets the limit")
	}
	var perKey *int32
	if kl.MaxRunningPerKey != nil {
		n := int32(*kl.MaxRunningPerKey)
		perKey = &n
	}
	var onFailure *string
	if kl.SequenceOnFailure != "" {
		onFailure = &kl.SequenceOnFailure
	}
	err := s.controlTx(ctx, "set topic key limits", func(tx pgx.Tx) error {
		var curPerKey *int32
		var curOnFailure *string
		var rated bool
		err := tx.QueryRow(ctx, `SELECT max_running_per_key, sequence_on_failure, rate_limit IS NOT NULL
			FROM topic_limits WHERE topic = $1`, topic).Scan(&curPerKey, &curOnFailure, &rated)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		samePerKey := (curPerKey == nil && perKey == nil) || (curPerKey != nil && perKey != nil && *curPerKey == *perKey)
		sameOnFailure := (curOnFailure == nil && onFailure == nil) || (curOnFailure != nil && onFailure != nil && *curOnFailure == *onFailure)
		if samePerKey && sameOnFailure {
			return nil // the limits it already has
		}
		if rated && (perKey != nil || onFailure != nil) {
			return apierr.Invalid("max_running_per_key", "topic %s has a rate limit; per-key limits and sequences cannot be combined with a rate limit", topic)
		}
		if _, err := tx.Exec(ctx, pauseBarrierSQL); err != nil {
			return err
		}
		if curOnFailure != nil && onFailure == nil {
			// The row lock orders this after every sequenced submit in
			// flight (they read the policy FOR SHARE) and holds later ones
			// until this commits; the count then sees what they wrote.
			if _, err := tx.Exec(ctx, `SELECT 1 FROM topic_limits WHERE topic = $1 FOR UPDATE`, topic); err != nil {
				return err
			}
			var queued bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs
				WHERE topic = $1 AND sequence_key IS NOT NULL AND status IN ('PENDING', 'RETRYING', 'RUNNING'))`, topic).Scan(&queued); err != nil {
				return err
			}
			if queued {
				return apierr.Invalid("sequence_on_failure", "cannot be cleared: topic %s has sequenced jobs queued or running; let them finish or cancel them first", topic)
			}
		}
		_, err = tx.Exec(ctx, setTopicKeyLimitsSQL, topic, perKey, onFailure, actor)
		return err
	})
	if err != nil {
		return TopicInfo{}, err
	}
	return s.Topic(ctx, topic)
}
