package api

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// TopicStore is the part of jobstore.Store that topics use.
type TopicStore interface {
	Topics(ctx context.Context) ([]jobstore.TopicInfo, error)
	Topic(ctx context.Context, topic string) (jobstore.TopicInfo, error)
	SetTopicLimit(ctx context.Context, topic string, maxRunning *int, actor string) (jobstore.TopicInfo, error)
	SetTopicRateLimit(ctx context.Context, topic string, rl *pulsetype.RateLimit, actor string) (jobstore.TopicInfo, error)
	SetTopicKeyLimits(ctx context.Context, topic string, kl jobstore.KeyLimits, actor string) (jobstore.TopicInfo, error)
	Breakers(ctx context.Context) ([]jobstore.Breaker, error)
	SetTopicBreaker(ctx context.Context, topic string, c jobstore.BreakerConfig, actor string) (jobstore.Breaker, error)
	ClearTopicBreaker(ctx context.Context, topic, actor string) (bool, error)
}

// TopicService implements pulsev1.TopicServiceServer: topics' live numbers
// and their fleet-wide limits (docs/topics.md). Its errors are apierr
// errors, mapped by each transport.
type TopicService struct {
	pulsev1.UnimplementedTopicServiceServer

	store  TopicStore
	logger *slog.Logger
}

// NewTopicService returns the service on store; a nil logger discards.
func NewTopicService(store TopicStore, logger *slog.Logger) *TopicService {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &TopicService{store: store, logger: logger}
}

// ListTopics returns every topic that has live or dead-lettered jobs, a
// limit, a pause, a connected worker or throughput in the last hour.
func (s *TopicService) ListTopics(ctx context.Context, _ *pulsev1.ListTopicsRequest) (*pulsev1.ListTopicsResponse, error) {
	topics, err := s.store.Topics(ctx)
	if err != nil {
		return nil, err
	}
	out := &pulsev1.ListTopicsResponse{Topics: make([]*pulsev1.TopicInfo, len(topics))}
	for i, t := range topics {
		out.Topics[i] = TopicToWire(t)
	}
	return out, nil
}

// GetTopic returns one topic; a valid topic nothing knows of reads as
// zeros with no limit. (HTTP's GET /v1/topics/{topic}; gRPC callers list.)
func (s *TopicService) GetTopic(ctx context.Context, topic string) (*pulsev1.TopicInfo, error) {
	if err := jobspec.ValidateTopic("topic", topic); err != nil {
		return nil, err
	}
	t, err := s.store.Topic(ctx, topic)
	if err != nil {
		return nil, err
	}
	return TopicToWire(t), nil
}

// SetTopicLimit sets or clears a topic's limit, as the caller. It returns
// once no claim on any gateway can decide under the old limit.
func (s *TopicService) SetTopicLimit(ctx context.Context, req *pulsev1.SetTopicLimitRequest) (*pulsev1.SetTopicLimitResponse, error) {
	var limit *int64
	if req.MaxRunning != nil {
		n := int64(req.GetMaxRunning())
		limit = &n
	}
	t, err := s.SetLimit(ctx, req.GetTopic(), limit)
	if err != nil {
		return nil, err
	}
	return &pulsev1.SetTopicLimitResponse{Topic: t}, nil
}

// SetLimit is SetTopicLimit for a transport whose numbers are wider than
// the wire's int32 (HTTP's JSON): nil clears the limit.
func (s *TopicService) SetLimit(ctx context.Context, topic string, maxRunning *int64) (*pulsev1.TopicInfo, error) {
	if err := jobspec.ValidateTopic("topic", topic); err != nil {
		return nil, err
	}
	var limit *int
	if maxRunning != nil {
		if *maxRunning < 0 || *maxRunning > pulsetype.MaxTopicLimit {
			return nil, apierr.Invalid("max_running", "is %d; it must be between 0 and %d, or null to clear the limit",
				*maxRunning, pulsetype.MaxTopicLimit)
		}
		n := int(*maxRunning)
		limit = &n
	}
	actor := actorOf(ctx)
	if err := storable.Text("actor", actor); err != nil {
		return nil, err
	}
	t, err := s.store.SetTopicLimit(ctx, topic, limit, actor)
	if err != nil {
		return nil, err
	}
	s.logger.Info("topic limit set", "topic", topic, "max_running", limit, "actor", actor)
	return TopicToWire(t), nil
}

// SetTopicRateLimit sets or clears (rate_limit unset) a topic's rate
// limit, as the caller. It returns once no claim on any gateway can
// decide under the old limit.
func (s *TopicService) SetTopicRateLimit(ctx context.Context, req *pulsev1.SetTopicRateLimitRequest) (*pulsev1.SetTopicRateLimitResponse, error) {
	var rl *pulsetype.RateLimit
	if w := req.GetRateLimit(); w != nil {
		if w.GetInterval() == nil {
			return nil, apierr.Invalid("rate_limit.interval", "is required: a duration from %s to %s", pulsetype.MinRateInterval, pulsetype.MaxRateInterval)
		}
		if err := w.GetInterval().CheckValid(); err != nil {
			return nil, apierr.Invalid("rate_limit.interval", "%v", err)
		}
		rl = &pulsetype.RateLimit{Limit: int(w.GetLimit()), Interval: w.GetInterval().AsDuration(), Key: w.GetKey()}
	}
	t, err := s.SetRateLimit(ctx, req.GetTopic(), rl)
	if err != nil {
		return nil, err
	}
	return &pulsev1.SetTopicRateLimitResponse{Topic: t}, nil
}

// SetRateLimit is SetTopicRateLimit for any transport: nil clears the
// rate limit.
func (s *TopicService) SetRateLimit(ctx context.Context, topic string, rl *pulsetype.RateLimit) (*pulsev1.TopicInfo, error) {
	if err := jobspec.ValidateTopic("topic", topic); err != nil {
		return nil, err
	}
	if rl != nil {
		if err := jobstore.ValidateRateLimit(*rl); err != nil {
			return nil, err
		}
	}
	actor := actorOf(ctx)
	if err := storable.Text("actor", actor); err != nil {
		return nil, err
	}
	t, err := s.store.SetTopicRateLimit(ctx, topic, rl, actor)
	if err != nil {
		return nil, err
	}
	if rl == nil {
		s.logger.Info("topic rate limit cleared", "topic", topic, "actor", actor)
	} else {
		s.logger.Info("topic rate limit set", "topic", topic, "rate_limit", rl.Limit, "rate_interval", rl.Interval,
			"rate_key", rl.Key, "actor", actor)
	}
	return TopicToWire(t), nil
}

// SetTopicKeyLimits sets a topic's per-key limits as a whole (both unset
// clears them), as the caller. It returns once no claim on any gateway
// can decide under the old limits.
func (s *TopicService) SetTopicKeyLimits(ctx context.Context, req *pulsev1.SetTopicKeyLimitsRequest) (*pulsev1.SetTopicKeyLimitsResponse, error) {
	var perKey *int64
	if req.MaxRunningPerKey != nil {
		n := int64(req.GetMaxRunningPerKey())
		perKey = &n
	}
	t, err := s.SetKeyLimits(ctx, req.GetTopic(), perKey, req.GetSequenceOnFailure())
	if err != nil {
		return nil, err
	}
	return &pulsev1.SetTopicKeyLimitsResponse{Topic: t}, nil
}

// SetKeyLimits is SetTopicKeyLimits for any transport: perKey nil is no
// cap, an empty sequenceOnFailure no sequence policy.
func (s *TopicService) SetKeyLimits(ctx context.Context, topic string, perKey *int64, sequenceOnFailure string) (*pulsev1.TopicInfo, error) {
	if err := jobspec.ValidateTopic("topic", topic); err != nil {
		return nil, err
	}
	kl := jobstore.KeyLimits{SequenceOnFailure: sequenceOnFailure}
	if perKey != nil {
		if *perKey < 1 || *perKey > pulsetype.MaxRunningPerKey {
			return nil, apierr.Invalid("max_running_per_key", "is %d; it must be between 1 and %d, or null for no cap",
				*perKey, pulsetype.MaxRunningPerKey)
		}
		n := int(*perKey)
		kl.MaxRunningPerKey = &n
	}
	if err := jobstore.ValidateKeyLimits(kl); err != nil {
		return nil, err
	}
	actor := actorOf(ctx)
	if err := storable.Text("actor", actor); err != nil {
		return nil, err
	}
	t, err := s.store.SetTopicKeyLimits(ctx, topic, kl, actor)
	if err != nil {
		return nil, err
	}
	s.logger.Info("topic key limits set", "topic", topic, "max_running_per_key", kl.MaxRunningPerKey,
		"sequence_on_failure", kl.SequenceOnFailure, "actor", actor)
	return TopicToWire(t), nil
}

// TopicToWire converts a topic's numbers to their wire form.
func TopicToWire(t jobstore.TopicInfo) *pulsev1.TopicInfo {
	out := &pulsev1.TopicInfo{
		Topic: t.Topic, Pending: t.Pending, Running: t.Running, Retrying: t.Retrying, DeadLettered: t.DeadLettered,
		CompletedLastHour: t.CompletedLastHour, FailedLastHour: t.FailedLastHour,
		Paused: t.Paused, ConnectedWorkers: int32(t.ConnectedWorkers),
		LimitUpdatedBy: t.LimitUpdatedBy, LimitUpdatedAt: timestampOrNil(t.LimitUpdatedAt),
	}
	if t.OldestPendingAge != nil {
		out.OldestPendingAge = durationpb.New(*t.OldestPendingAge)
	}
	if t.MaxRunning != nil {
		n := int32(*t.MaxRunning)
		out.MaxRunning = &n
	}
	if t.MaxRunningPerKey != nil {
		n := int32(*t.MaxRunningPerKey)
		out.MaxRunningPerKey = &n
	}
	out.SequenceOnFailure = t.SequenceOnFailure
	if rl := t.RateLimit; rl != nil {
		out.RateLimit = &pulsev1.RateLimit{Limit: int32(rl.Limit), Interval: durationpb.New(rl.Interval), Key: rl.Key}
	}
	return out
}

// ListTopicBreakers returns every topic's circuit breaker.
func (s *TopicService) ListTopicBreakers(ctx context.Context, _ *pulsev1.ListTopicBreakersRequest) (*pulsev1.ListTopicBreakersResponse, error) {
	bs, err := s.store.Breakers(ctx)
	if err != nil {
		return nil, err
	}
	out := &pulsev1.ListTopicBreakersResponse{Breakers: make([]*pulsev1.TopicBreaker, len(bs))}
	for i, b := range bs {
		out.Breakers[i] = BreakerToWire(b)
	}
	return out, nil
}

// SetTopicBreaker sets a topic's circuit breaker, as the caller. Every
// setting is required; errors name the field.
func (s *TopicService) SetTopicBreaker(ctx context.Context, req *pulsev1.SetTopicBreakerRequest) (*pulsev1.SetTopicBreakerResponse, error) {
	if err := jobspec.ValidateTopic("topic", req.GetTopic()); err != nil {
		return nil, err
	}
	var c jobstore.BreakerConfig
	c.FailureRatio, c.MinVolume = req.GetFailureRatio(), int(req.GetMinVolume())
	var err error
	if c.Window, err = requiredDuration("window", req.GetWindow()); err != nil {
		return nil, err
	}
	if c.Cooldown, err = requiredDuration("cooldown", req.GetCooldown()); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	actor := actorOf(ctx)
	if err := storable.Text("actor", actor); err != nil {
		return nil, err
	}
	b, err := s.store.SetTopicBreaker(ctx, req.GetTopic(), c, actor)
	if err != nil {
		return nil, err
	}
	s.logger.Info("topic breaker set", "topic", b.Topic, "failure_ratio", c.FailureRatio, "window", c.Window,
		"min_volume", c.MinVolume, "cooldown", c.Cooldown, "actor", actor)
	return &pulsev1.SetTopicBreakerResponse{Breaker: BreakerToWire(b)}, nil
}

// ClearTopicBreaker removes a topic's breaker, as the caller.
func (s *TopicService) ClearTopicBreaker(ctx context.Context, req *pulsev1.ClearTopicBreakerRequest) (*pulsev1.ClearTopicBreakerResponse, error) {
	if err := jobspec.ValidateTopic("topic", req.GetTopic()); err != nil {
		return nil, err
	}
	actor := actorOf(ctx)
	if err := storable.Text("actor", actor); err != nil {
		return nil, err
	}
	ok, err := s.store.ClearTopicBreaker(ctx, req.GetTopic(), actor)
	if err != nil {
		return nil, err
	}
	if ok {
		s.logger.Info("topic breaker cleared", "topic", req.GetTopic(), "actor", actor)
	}
	return &pulsev1.ClearTopicBreakerResponse{Cleared: ok}, nil
}

// requiredDuration reads a duration that must be given.
func requiredDuration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, apierr.Invalid(field, "is required")
	}
	if err := d.CheckValid(); err != nil {
		return 0, apierr.Invalid(field, "%v", err)
	}
	return d.AsDuration(), nil
}

// BreakerToWire converts a topic's breaker to its wire form.
func BreakerToWire(b jobstore.Breaker) *pulsev1.TopicBreaker {
	return &pulsev1.TopicBreaker{
		Topic: b.Topic, FailureRatio: b.FailureRatio, Window: durationpb.New(b.Window), MinVolume: int32(b.MinVolume),
		Cooldown: durationpb.New(b.Cooldown), State: string(b.State), OpenedAt: timestampOrNil(b.OpenedAt),
		OpenUntil: timestampOrNil(b.OpenUntil), Opens: b.Opens, UpdatedBy: b.UpdatedBy, UpdatedAt: timestampOrNil(&b.UpdatedAt),
	}
}
