package pulsehttp

import "time"

// Topic is one topic as GET /v1/topics and GET /v1/topics/{topic} show it
// (docs/topics.md).
type Topic struct {
	Topic        string `json:"topic"`
	Pending      int64  `json:"pending"`
	Running      int64  `json:"running"`
	Retrying     int64  `json:"retrying"`
	DeadLettered int64  `json:"dead_lettered"`
	// Attempts that completed, and that failed (retried or dead
	// lettered), in the last hour.
	CompletedLastHour int64 `json:"completed_last_hour"`
	FailedLastHour    int64 `json:"failed_last_hour"`
	// OldestPendingAge is how long the longest-waiting due job has waited
	// since it became due, a Go duration; null when none is due.
	OldestPendingAge *string `json:"oldest_pending_age"`
	// MaxRunning is the fleet-wide limit on RUNNING jobs; null: none.
	MaxRunning *int32 `json:"max_running"`
	// Paused is true while the topic or the global scope is paused.
	Paused           bool  `json:"paused"`
	ConnectedWorkers int32 `json:"connected_workers"`
	// Who set the limit, and when; empty and null without a limit.
	LimitUpdatedBy string     `json:"limit_updated_by"`
	LimitUpdatedAt *time.Time `json:"limit_updated_at"`
	// RateLimit is the topic's rate limit; null: none.
	RateLimit *RateLimit `json:"rate_limit"`
	// MaxRunningPerKey is the fleet-wide limit on RUNNING jobs of one
	// concurrency key; null: none.
	MaxRunningPerKey *int32 `json:"max_running_per_key"`
	// SequenceOnFailure is the topic's sequence policy, "block" or
	// "continue"; empty: the topic takes no sequenced jobs.
	SequenceOnFailure string `json:"sequence_on_failure"`
}

// RateLimit is a topic's limit on starts (docs/flow-control.md): at most
// RateLimit starts in any RateInterval (a Go duration, 1ms..24h), counted
// per key as RateKey says: "none", "job" or "args:<field>". It is the
// body of PUT /v1/topics/{topic}/rate-limit too, where rate_limit null
// clears the limit.
type RateLimit struct {
	RateLimit    *int64 `json:"rate_limit"`
	RateInterval string `json:"rate_interval,omitempty"`
	RateKey      string `json:"rate_key,omitempty"`
}

// TopicList answers GET /v1/topics, by name.
type TopicList struct {
	Topics []Topic `json:"topics"`
}

// TopicLimit is the body of PUT /v1/topics/{topic}: max_running is
// 0 … 1000000, or null to clear the limit; it must be present. The answer
// is the topic after the change.
type TopicLimit struct {
	MaxRunning *int64 `json:"max_running"`
}

// TopicKeyLimits is the body of PUT /v1/topics/{topic}/key-limits, the
// topic's per-key limits as a whole (docs/flow-control.md):
// max_running_per_key is 1 … 1000000 or null (no cap);
// sequence_on_failure is "block", "continue" or "" (no sequences). At
// least one must be present; an absent one is cleared. The answer is the
// topic after the change.
type TopicKeyLimits struct {
	MaxRunningPerKey  *int64 `json:"max_running_per_key"`
	SequenceOnFailure string `json:"sequence_on_failure"`
}

// TopicBreaker is a topic's circuit breaker (GET /v1/breakers, and the
// answer of PUT /v1/topics/{topic}/breaker). Window and Cooldown are Go
// durations; State is closed, open or half_open.
type TopicBreaker struct {
	Topic        string     `json:"topic"`
	FailureRatio float64    `json:"failure_ratio"`
	Window       string     `json:"window"`
	MinVolume    int32      `json:"min_volume"`
	Cooldown     string     `json:"cooldown"`
	State        string     `json:"state"`
	OpenedAt     *time.Time `json:"opened_at"`
	OpenUntil    *time.Time `json:"open_until"`
	Opens        int64      `json:"opens"`
	UpdatedBy    string     `json:"updated_by"`
	UpdatedAt    *time.Time `json:"updated_at"`
}

// TopicBreakerList answers GET /v1/breakers, by topic.
type TopicBreakerList struct {
	Breakers []TopicBreaker `json:"breakers"`
}

// TopicBreakerSettings is the body of PUT /v1/topics/{topic}/breaker:
// every field is required. Window (whole minutes, 1m..24h) and Cooldown
// (1s..24h) are Go durations; FailureRatio is above 0 and at most 1;
// MinVolume 1..1000000.
type TopicBreakerSettings struct {
	FailureRatio *float64 `json:"failure_ratio"`
	Window       string   `json:"window"`
	MinVolume    *int64   `json:"min_volume"`
	Cooldown     string   `json:"cooldown"`
}
