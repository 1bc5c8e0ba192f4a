package jobstore

import (
	"context"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// RateWait is when a rate-limited topic's window next gives room
// (ADR-0051): the oldest start still in the window plus the interval,
// when the sliding log frees its next start. Keyed says the limit counts
// per key: another key may have room before Until, so a new job of the
// topic is worth a claim.
type RateWait struct {
	Until time.Time
	Keyed bool
}

// rateWaitsSQL reads, for each rate-limited topic of $1, when its window
// next gives room: NULL when it has room now (a topic limited as a whole
// under its limit) or no start in the window. For a keyed topic it
// answers whenever any key has a start in the window: the earliest any
// key gets room back, which may be early for the keys waiting (a claim
// then takes nothing and learns the next time), never late. One probe of
// topic_rate_log_prune_idx per topic, plus the count of its window for a
// topic limited as a whole.
const rateWaitsSQL = `
SELECT l.topic, l.rate_key <> 'none',
       CASE WHEN l.rate_key <> 'none' OR l.rate_limit <= (
                SELECT count(*) FROM topic_rate_log AS g
                WHERE g.topic = l.topic AND g.key = '' AND g.started_at > statement_timestamp() - l.rate_interval)
            THEN (SELECT min(g.started_at) FROM topic_rate_log AS g
                  WHERE g.topic = l.topic AND g.started_at > statement_timestamp() - l.rate_interval) + l.rate_interval
       END
FROM topic_limits AS l
WHERE l.topic = ANY($1::text[]) AND l.rate_limit IS NOT NULL`

// claimLimited runs claimLimitedSQL and, when it came back short, learns
// when the group's rate-limited topics next have room (RateWaits): one
// more read, on the limited path only, and only for a claim that did not
// fill its slots.
func (s *Store) claimLimited(ctx context.Context, args []any) ([]pulsetype.Claimed, error) {
	out, _, err := s.claimWith(ctx, claimLimitedSQL, args)
	if err != nil {
		return nil, err
	}
	if len(out) < args[1].(int) {
		topics := args[0].([]string)
		waits, err := s.rateWaitsOf(ctx, topics)
		for _, t := range topics {
			if w, ok := waits[t]; ok && err == nil {
				s.rateWaits.Store(t, w)
			} else {
				s.rateWaits.Delete(t)
			}
		}
	}
	return out, nil
}

func (s *Store) rateWaitsOf(ctx context.Context, topics []string) (map[string]RateWait, error) {
	rows, err := s.pool.Query(ctx, rateWaitsSQL, topics)
	if err != nil {
		return nil, interpretError("read rate limits", err)
	}
	defer rows.Close()
	out := map[string]RateWait{}
	for rows.Next() {
		var topic string
		var keyed bool
		var until *time.Time
		if err := rows.Scan(&topic, &keyed, &until); err != nil {
			return nil, interpretError("read rate limits", err)
		}
		if until != nil {
			out[topic] = RateWait{Until: *until, Keyed: keyed}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("read rate limits", err)
	}
	return out, nil
}

// RateLimitedUntil reads when topic's rate limit next gives room (ok
// false: it has no rate limit, or room now).
func (s *Store) RateLimitedUntil(ctx context.Context, topic string) (until time.Time, keyed, ok bool, err error) {
	waits, err := s.rateWaitsOf(ctx, []string{topic})
	if err != nil {
		return time.Time{}, false, false, err
	}
	w, ok := waits[topic]
	return w.Until, w.Keyed, ok, nil
}

// RateWaits returns, for those of topics whose last short claim on this
// Store found them at their rate limit, when their window next gives
// room. It reads memory only: the dispatcher asks after every short claim.
func (s *Store) RateWaits(topics []string) map[string]RateWait {
	var out map[string]RateWait
	for _, t := range topics {
		if v, ok := s.rateWaits.Load(t); ok {
			if out == nil {
				out = map[string]RateWait{}
			}
			out[t] = v.(RateWait)
		}
	}
	return out
}
