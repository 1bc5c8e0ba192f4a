package api

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// InterimTopicStore is what InterimTopics reads.
type InterimTopicStore interface {
	TopicSummaries(ctx context.Context) ([]jobstore.TopicSummary, error)
	DispatchState(ctx context.Context) (jobstore.DispatchState, error)
}

// InterimTopics serves the dashboard's per-topic table until the topics
// work lands (the TopicService over Store.Topics and Store.SetTopicLimit,
// with the fleet-wide max_running limit). It answers ListTopics from
// jobstore.TopicSummaries and the pause state, with no limits; it cannot
// set one, and says so. When the real TopicService is wired into
// ui.Options.Topics, this file and jobstore/topic_summary.go go.
type InterimTopics struct {
	store InterimTopicStore
}

// NewInterimTopics returns the interim topic read over store.
func NewInterimTopics(store InterimTopicStore) *InterimTopics { return &InterimTopics{store: store} }

// ErrTopicLimitsUnavailable is SetTopicLimit's answer in a build without
// topic limits.
var ErrTopicLimitsUnavailable = apierr.Unavailable("topic limits are not available in this build of control-api: the per-topic max_running limit arrives with the topics work", nil)

// ListTopics returns every topic with jobs, throughput in the last hour
// or a connected worker, by name.
func (t *InterimTopics) ListTopics(ctx context.Context, _ *pulsev1.ListTopicsRequest) (*pulsev1.ListTopicsResponse, error) {
	sums, err := t.store.TopicSummaries(ctx)
	if err != nil {
		return nil, err
	}
	state, err := t.store.DispatchState(ctx)
	if err != nil {
		return nil, err
	}
	out := &pulsev1.ListTopicsResponse{Topics: make([]*pulsev1.TopicInfo, len(sums))}
	for i, s := range sums {
		_, paused := state.Blocking(s.Topic)
		info := &pulsev1.TopicInfo{
			Topic: s.Topic, Pending: s.Pending, Running: s.Running, Retrying: s.Retrying,
			DeadLettered: s.DeadLettered, CompletedLastHour: s.CompletedLastHour, FailedLastHour: s.FailedLastHour,
			Paused: paused, ConnectedWorkers: int32(s.ConnectedWorkers),
		}
		if s.OldestDueMicros > 0 {
			info.OldestPendingAge = durationpb.New(s.OldestDue())
		}
		out.Topics[i] = info
	}
	return out, nil
}

// SetTopicLimit is refused: this build has no topic limits.
func (t *InterimTopics) SetTopicLimit(context.Context, *pulsev1.SetTopicLimitRequest) (*pulsev1.SetTopicLimitResponse, error) {
	return nil, ErrTopicLimitsUnavailable
}
