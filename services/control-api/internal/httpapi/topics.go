package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// topicLimitBodyLimit bounds a PUT /v1/topics/{topic} body: one number.
const topicLimitBodyLimit = 4 << 10

// TopicService is what the topic routes call: api.TopicService.
type TopicService interface {
	ListTopics(ctx context.Context, req *pulsev1.ListTopicsRequest) (*pulsev1.ListTopicsResponse, error)
	GetTopic(ctx context.Context, topic string) (*pulsev1.TopicInfo, error)
	SetLimit(ctx context.Context, topic string, maxRunning *int64) (*pulsev1.TopicInfo, error)
	SetRateLimit(ctx context.Context, topic string, rl *pulsetype.RateLimit) (*pulsev1.TopicInfo, error)
	SetKeyLimits(ctx context.Context, topic string, perKey *int64, sequenceOnFailure string) (*pulsev1.TopicInfo, error)
	ListTopicBreakers(ctx context.Context, req *pulsev1.ListTopicBreakersRequest) (*pulsev1.ListTopicBreakersResponse, error)
	SetTopicBreaker(ctx context.Context, req *pulsev1.SetTopicBreakerRequest) (*pulsev1.SetTopicBreakerResponse, error)
	ClearTopicBreaker(ctx context.Context, req *pulsev1.ClearTopicBreakerRequest) (*pulsev1.ClearTopicBreakerResponse, error)
}

// RegisterTopics mounts the topic routes (docs/topics.md) on mux.
func (h *Handler) RegisterTopics(mux Mux, svc TopicService) {
	t := &topicRoutes{svc: svc}
	h.mount(mux, "GET /v1/topics", h.route(t.list))
	h.mount(mux, "GET /v1/topics/{topic}", h.route(t.get))
	h.mount(mux, "PUT /v1/topics/{topic}", h.route(t.setLimit))
	h.mount(mux, "PUT /v1/topics/{topic}/rate-limit", h.route(t.setRateLimit))
	h.mount(mux, "PUT /v1/topics/{topic}/key-limits", h.route(t.setKeyLimits))
	h.mount(mux, "GET /v1/breakers", h.route(t.listBreakers))
	h.mount(mux, "PUT /v1/topics/{topic}/breaker", h.route(t.setBreaker))
	h.mount(mux, "DELETE /v1/topics/{topic}/breaker", h.route(t.clearBreaker))
}

type topicRoutes struct {
	svc TopicService
}

func (t *topicRoutes) list(w http.ResponseWriter, r *http.Request) error {
	resp, err := t.svc.ListTopics(r.Context(), &pulsev1.ListTopicsRequest{})
	if err != nil {
		return err
	}
	out := pulsehttp.TopicList{Topics: make([]pulsehttp.Topic, len(resp.GetTopics()))}
	for i, ti := range resp.GetTopics() {
		out.Topics[i] = topicToJSON(ti)
	}
	return writeJSON(w, http.StatusOK, out)
}

func (t *topicRoutes) get(w http.ResponseWriter, r *http.Request) error {
	ti, err := t.svc.GetTopic(r.Context(), r.PathValue("topic"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, topicToJSON(ti))
}

// setLimit reads {"max_running": N} or {"max_running": null}; the field
// must be there, so an empty body or {} is refused rather than read as
// "clear the limit".
func (t *topicRoutes) setLimit(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, topicLimitBodyLimit, "body", "")
	if err != nil {
		return err
	}
	var in pulsehttp.TopicLimit
	if err := decodeStorable(body, "", &in); err != nil {
		return err
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(body, &present); err != nil {
		return apierr.Invalid("body", "is not valid JSON: %v", err)
	}
	if _, ok := present["max_running"]; !ok {
		return apierr.Invalid("max_running", "is required: a number from 0 to 1000000, or null to clear the limit")
	}
	ti, err := t.svc.SetLimit(r.Context(), r.PathValue("topic"), in.MaxRunning)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, topicToJSON(ti))
}

// setRateLimit reads {"rate_limit": N, "rate_interval": "1s", "rate_key":
// "none"} or {"rate_limit": null}; rate_limit must be there, so an empty
// body or {} is refused rather than read as "clear the limit".
func (t *topicRoutes) setRateLimit(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, topicLimitBodyLimit, "body", "")
	if err != nil {
		return err
	}
	var in pulsehttp.RateLimit
	if err := decodeStorable(body, "", &in); err != nil {
		return err
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(body, &present); err != nil {
		return apierr.Invalid("body", "is not valid JSON: %v", err)
	}
	if _, ok := present["rate_limit"]; !ok {
		return apierr.Invalid("rate_limit", "is required: starts per interval from 1 to %d, or null to clear the rate limit", pulsetype.MaxRateLimit)
	}
	var rl *pulsetype.RateLimit
	if in.RateLimit != nil {
		if *in.RateLimit < 1 || *in.RateLimit > pulsetype.MaxRateLimit {
			return apierr.Invalid("rate_limit", "is %d; it must be between 1 and %d starts per interval", *in.RateLimit, pulsetype.MaxRateLimit)
		}
		if in.RateInterval == "" {
			return apierr.Invalid("rate_interval", "is required: a duration like 1s or 1m, from %s to %s", pulsetype.MinRateInterval, pulsetype.MaxRateInterval)
		}
		every, err := time.ParseDuration(in.RateInterval)
		if err != nil {
			return apierr.Invalid("rate_interval", "is %q, not a duration like 1s or 1m", in.RateInterval)
		}
		key := in.RateKey
		if key == "" {
			key = pulsetype.RateKeyNone
		}
		rl = &pulsetype.RateLimit{Limit: int(*in.RateLimit), Interval: every, Key: key}
	}
	ti, err := t.svc.SetRateLimit(r.Context(), r.PathValue("topic"), rl)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, topicToJSON(ti))
}

// setKeyLimits reads {"max_running_per_key": N|null, "sequence_on_failure":
// "block"|"continue"|""}: the topic's per-key limits as a whole. One of the
// two must be there, so an empty body or {} is refused rather than read as
// "clear them".
func (t *topicRoutes) setKeyLimits(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, topicLimitBodyLimit, "body", "")
	if err != nil {
		return err
	}
	var in pulsehttp.TopicKeyLimits
	if err := decodeStorable(body, "", &in); err != nil {
		return err
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(body, &present); err != nil {
		return apierr.Invalid("body", "is not valid JSON: %v", err)
	}
	_, perKey := present["max_running_per_key"]
	_, sequence := present["sequence_on_failure"]
	if !perKey && !sequence {
		return apierr.Invalid("max_running_per_key", "or sequence_on_failure is required: a cap from 1 to %d (null: none), or a sequence policy %q or %q (\"\": none)",
			pulsetype.MaxRunningPerKey, pulsetype.SequenceBlock, pulsetype.SequenceContinue)
	}
	ti, err := t.svc.SetKeyLimits(r.Context(), r.PathValue("topic"), in.MaxRunningPerKey, in.SequenceOnFailure)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, topicToJSON(ti))
}

func topicToJSON(t *pulsev1.TopicInfo) pulsehttp.Topic {
	out := pulsehttp.Topic{
		Topic: t.GetTopic(), Pending: t.GetPending(), Running: t.GetRunning(), Retrying: t.GetRetrying(),
		DeadLettered: t.GetDeadLettered(), CompletedLastHour: t.GetCompletedLastHour(), FailedLastHour: t.GetFailedLastHour(),
		Paused: t.GetPaused(), ConnectedWorkers: t.GetConnectedWorkers(),
		LimitUpdatedBy: t.GetLimitUpdatedBy(), LimitUpdatedAt: api.TimeFromWire(t.GetLimitUpdatedAt()),
	}
	if d := t.GetOldestPendingAge(); d != nil {
		s := d.AsDuration().String()
		out.OldestPendingAge = &s
	}
	if t.MaxRunning != nil {
		n := t.GetMaxRunning()
		out.MaxRunning = &n
	}
	if t.MaxRunningPerKey != nil {
		n := t.GetMaxRunningPerKey()
		out.MaxRunningPerKey = &n
	}
	out.SequenceOnFailure = t.GetSequenceOnFailure()
	if rl := t.GetRateLimit(); rl != nil {
		n := int64(rl.GetLimit())
		out.RateLimit = &pulsehttp.RateLimit{RateLimit: &n, RateInterval: rl.GetInterval().AsDuration().String(), RateKey: rl.GetKey()}
	}
	return out
}

func (t *topicRoutes) listBreakers(w http.ResponseWriter, r *http.Request) error {
	resp, err := t.svc.ListTopicBreakers(r.Context(), &pulsev1.ListTopicBreakersRequest{})
	if err != nil {
		return err
	}
	out := pulsehttp.TopicBreakerList{Breakers: make([]pulsehttp.TopicBreaker, len(resp.GetBreakers()))}
	for i, b := range resp.GetBreakers() {
		out.Breakers[i] = breakerToJSON(b)
	}
	return writeJSON(w, http.StatusOK, out)
}

// setBreaker reads {"failure_ratio", "window", "min_volume", "cooldown"},
// every one required.
func (t *topicRoutes) setBreaker(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, topicLimitBodyLimit, "body", "")
	if err != nil {
		return err
	}
	var in pulsehttp.TopicBreakerSettings
	if err := decodeStorable(body, "", &in); err != nil {
		return err
	}
	req := &pulsev1.SetTopicBreakerRequest{Topic: r.PathValue("topic")}
	switch {
	case in.FailureRatio == nil:
		return apierr.Invalid("failure_ratio", "is required: above 0 and at most 1, such as 0.5")
	case in.MinVolume == nil:
		return apierr.Invalid("min_volume", "is required: the fewest settled attempts the ratio is judged on, such as 20")
	case in.Window == "":
		return apierr.Invalid("window", "is required: whole minutes such as 1m or 5m")
	case in.Cooldown == "":
		return apierr.Invalid("cooldown", "is required: a duration such as 30s or 5m")
	case *in.MinVolume < 1 || *in.MinVolume > jobstore.MaxBreakerMinVolume:
		return apierr.Invalid("min_volume", "is %d; it must be between 1 and %d", *in.MinVolume, jobstore.MaxBreakerMinVolume)
	}
	req.FailureRatio, req.MinVolume = *in.FailureRatio, int32(*in.MinVolume)
	if req.Window, err = parseDuration("window", in.Window, "1m or 5m"); err != nil {
		return err
	}
	if req.Cooldown, err = parseDuration("cooldown", in.Cooldown, "30s or 5m"); err != nil {
		return err
	}
	resp, err := t.svc.SetTopicBreaker(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, breakerToJSON(resp.GetBreaker()))
}

// clearBreaker answers 204, or 404 when the topic has no breaker.
func (t *topicRoutes) clearBreaker(w http.ResponseWriter, r *http.Request) error {
	resp, err := t.svc.ClearTopicBreaker(r.Context(), &pulsev1.ClearTopicBreakerRequest{Topic: r.PathValue("topic")})
	if err != nil {
		return err
	}
	if !resp.GetCleared() {
		return apierr.NotFound("breaker of topic", r.PathValue("topic"))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func breakerToJSON(b *pulsev1.TopicBreaker) pulsehttp.TopicBreaker {
	return pulsehttp.TopicBreaker{
		Topic: b.GetTopic(), FailureRatio: b.GetFailureRatio(), Window: b.GetWindow().AsDuration().String(),
		MinVolume: b.GetMinVolume(), Cooldown: b.GetCooldown().AsDuration().String(), State: b.GetState(),
		OpenedAt: api.TimeFromWire(b.GetOpenedAt()), OpenUntil: api.TimeFromWire(b.GetOpenUntil()), Opens: b.GetOpens(),
		UpdatedBy: b.GetUpdatedBy(), UpdatedAt: api.TimeFromWire(b.GetUpdatedAt()),
	}
}
