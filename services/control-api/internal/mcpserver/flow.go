package mcpserver

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

// RateLimitArgs set or clear a topic's rate limit (docs/flow-control.md).
type RateLimitArgs struct {
	Topic        string `json:"topic" jsonschema:"the topic"`
	RateLimit    *int64 `json:"rate_limit" jsonschema:"starts allowed per interval, fleet-wide (1 to 10000), or null to clear the rate limit"`
	RateInterval string `json:"rate_interval,omitempty" jsonschema:"the sliding window, a duration from 1ms to 24h such as 1s or 1m; required with rate_limit"`
	RateKey      string `json:"rate_key,omitempty" jsonschema:"what the limit counts by: none (the topic as a whole, the default), job (each job's rate_key) or args:<field> (a top-level args field)"`
}

// KeyLimitsArgs set a topic's per-key limits as a whole.
type KeyLimitsArgs struct {
	Topic             string `json:"topic" jsonschema:"the topic"`
	MaxRunningPerKey  *int64 `json:"max_running_per_key" jsonschema:"the most jobs of one concurrency key running at once across the fleet (1 to 1000000), or null for no cap"`
	SequenceOnFailure string `json:"sequence_on_failure" jsonschema:"the topic's sequence policy: block (a dead-lettered job holds its sequence), continue (it does not), or empty for no sequences"`
}

// BreakerArgs set a topic's circuit breaker; every setting is required.
type BreakerArgs struct {
	Topic        string  `json:"topic" jsonschema:"the topic"`
	FailureRatio float64 `json:"failure_ratio" jsonschema:"the failed share of settled attempts that opens the breaker: above 0 and at most 1, such as 0.5"`
	Window       string  `json:"window" jsonschema:"the window the ratio is judged over, whole minutes such as 1m or 5m"`
	MinVolume    int64   `json:"min_volume" jsonschema:"the fewest settled attempts within the window the ratio is judged on, such as 20"`
	Cooldown     string  `json:"cooldown" jsonschema:"how long an open breaker pauses the topic before it lets a trial through, such as 30s or 5m"`
}

// BreakerCleared answers topics.clear_breaker.
type BreakerCleared struct {
	Topic   string `json:"topic"`
	Cleared bool   `json:"cleared"`
}

// addFlowTools adds the tools that read and set the flow-control limits
// beyond max_running: rate limits, per-key limits and circuit breakers.
// They call the same api.TopicService methods as the HTTP routes, which
// validate every setting and name the field they refuse.
func (s *Server) addFlowTools() {
	tool(s, &mcp.Tool{Name: ToolTopicSetRateLimit, Title: "Rate-limit a topic", Annotations: destructive(true),
		Description: "Set a topic's rate limit — at most rate_limit starts per rate_interval, fleet-wide, for the topic as a whole or per key — or clear it with rate_limit null. Decided in the claim on every gateway from the next claim on. Operators only; recorded with the actor."},
		func(ctx context.Context, in RateLimitArgs) (pulsehttp.Topic, string, error) {
			var rl *pulsetype.RateLimit
			if in.RateLimit != nil {
				every, err := durationArg("rate_interval", in.RateInterval, "1s or 1m")
				if err != nil {
					return pulsehttp.Topic{}, "", err
				}
				key := in.RateKey
				if key == "" {
					key = pulsetype.RateKeyNone
				}
				rl = &pulsetype.RateLimit{Limit: int(*in.RateLimit), Interval: every, Key: key}
			}
			ti, err := s.deps.Topics.SetRateLimit(ctx, in.Topic, rl)
			if err != nil {
				return pulsehttp.Topic{}, "", err
			}
			out := httpapi.TopicToJSON(ti)
			if out.RateLimit == nil {
				return out, out.Topic + " has no rate limit", nil
			}
			return out, fmt.Sprintf("%s starts at most %d jobs per %s (counted by %s)", out.Topic, *out.RateLimit.RateLimit,
				out.RateLimit.RateInterval, out.RateLimit.RateKey), nil
		}, bound{prop: "rate_limit", min: 1, max: pulsetype.MaxRateLimit})

	tool(s, &mcp.Tool{Name: ToolTopicSetKeyLimits, Title: "Limit a topic per key", Annotations: destructive(true),
		Description: "Set a topic's per-key limits as a whole: max_running_per_key caps the running jobs of each concurrency key (keys are served round-robin), sequence_on_failure lets jobs with a sequence_key start one at a time in submit order. Null and empty clear them. Operators only; recorded with the actor."},
		func(ctx context.Context, in KeyLimitsArgs) (pulsehttp.Topic, string, error) {
			ti, err := s.deps.Topics.SetKeyLimits(ctx, in.Topic, in.MaxRunningPerKey, in.SequenceOnFailure)
			if err != nil {
				return pulsehttp.Topic{}, "", err
			}
			out := httpapi.TopicToJSON(ti)
			perKey, sequences := "no cap per key", "no sequences"
			if out.MaxRunningPerKey != nil {
				perKey = fmt.Sprintf("at most %d running per key", *out.MaxRunningPerKey)
			}
			if out.SequenceOnFailure != "" {
				sequences = "sequences, " + out.SequenceOnFailure + " on failure"
			}
			return out, fmt.Sprintf("%s: %s; %s", out.Topic, perKey, sequences), nil
		}, bound{prop: "max_running_per_key", min: 1, max: pulsetype.MaxRunningPerKey})

	tool(s, &mcp.Tool{Name: ToolTopicBreakers, Title: "Circuit breakers", Annotations: readOnly,
		Description: "Every topic's circuit breaker: its settings, its state (closed, open, half_open), when it last opened and until when, and how often it has opened."},
		func(ctx context.Context, _ Empty) (pulsehttp.TopicBreakerList, string, error) {
			resp, err := s.deps.Topics.ListTopicBreakers(ctx, &pulsev1.ListTopicBreakersRequest{})
			if err != nil {
				return pulsehttp.TopicBreakerList{}, "", err
			}
			out := pulsehttp.TopicBreakerList{Breakers: make([]pulsehttp.TopicBreaker, len(resp.GetBreakers()))}
			open := 0
			for i, b := range resp.GetBreakers() {
				out.Breakers[i] = httpapi.BreakerToJSON(b)
				if out.Breakers[i].State != "closed" {
					open++
				}
			}
			return out, fmt.Sprintf("%d breakers, %d not closed", len(out.Breakers), open), nil
		})

	tool(s, &mcp.Tool{Name: ToolTopicSetBreaker, Title: "Set a topic's circuit breaker", Annotations: destructive(true),
		Description: "Give a topic a circuit breaker, or change it: when at least min_volume attempts settled within window and failure_ratio of them failed, the topic pauses itself (actor breaker) for cooldown, then lets one trial through. Operators resume or pause the topic to override it. Operators only; recorded with the actor."},
		func(ctx context.Context, in BreakerArgs) (pulsehttp.TopicBreaker, string, error) {
			window, err := durationArg("window", in.Window, "1m or 5m")
			if err != nil {
				return pulsehttp.TopicBreaker{}, "", err
			}
			cooldown, err := durationArg("cooldown", in.Cooldown, "30s or 5m")
			if err != nil {
				return pulsehttp.TopicBreaker{}, "", err
			}
			resp, err := s.deps.Topics.SetTopicBreaker(ctx, &pulsev1.SetTopicBreakerRequest{
				Topic: in.Topic, FailureRatio: in.FailureRatio, MinVolume: int32(in.MinVolume),
				Window: durationpb.New(window), Cooldown: durationpb.New(cooldown),
			})
			if err != nil {
				return pulsehttp.TopicBreaker{}, "", err
			}
			out := httpapi.BreakerToJSON(resp.GetBreaker())
			return out, fmt.Sprintf("%s opens when %.0f%% of at least %d attempts within %s fail, for %s; now %s",
				out.Topic, out.FailureRatio*100, out.MinVolume, out.Window, out.Cooldown, out.State), nil
		}, bound{prop: "failure_ratio", min: 0, max: 1}, bound{prop: "min_volume", min: 1, max: jobstore.MaxBreakerMinVolume})

	tool(s, &mcp.Tool{Name: ToolTopicClearBreaker, Title: "Remove a topic's circuit breaker", Annotations: destructive(true),
		Description: "Remove a topic's circuit breaker; a pause it holds ends and the topic's own limit is restored. Operators only; recorded with the actor."},
		func(ctx context.Context, in TopicArg) (BreakerCleared, string, error) {
			resp, err := s.deps.Topics.ClearTopicBreaker(ctx, &pulsev1.ClearTopicBreakerRequest{Topic: in.Topic})
			if err != nil {
				return BreakerCleared{}, "", err
			}
			if !resp.GetCleared() {
				return BreakerCleared{}, "", apierr.NotFound("breaker of topic", in.Topic)
			}
			return BreakerCleared{Topic: in.Topic, Cleared: true}, in.Topic + " has no breaker now", nil
		})
}

// durationArg parses a required duration argument, naming it when it is
// missing or malformed.
func durationArg(name, value, example string) (time.Duration, error) {
	if value == "" {
		return 0, apierr.Invalid(name, "is required: a duration such as %s", example)
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0, apierr.Invalid(name, "is %q, not a duration such as %s", value, example)
	}
	return d, nil
}
