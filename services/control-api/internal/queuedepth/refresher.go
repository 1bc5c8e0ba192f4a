package queuedepth

import (
	"context"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
)

// IntervalDefault is how often the depth is recounted (the app runs
// Refresh on a pkg/server/loop every PULSE_QUEUE_DEPTH_INTERVAL).
const IntervalDefault = 5 * time.Second

// MaxDuty is the largest share of time the count may keep a Postgres
// backend busy. The count is O(live jobs): measured on a two-core machine,
// 0.16 s while a 200,000-job backlog is worked off and about 0.4 s for a
// million, which at a 5 s interval is a twelfth of a core spent on a
// gauge, for as long as the backlog lasts. After a count that took d,
// Refresh skips the ticks that come before d / MaxDuty has passed since
// it started, so the gauge grows staler as the backlog grows instead of
// growing costlier; pulse_queue_depth_counted_timestamp_seconds says how
// stale it is.
const MaxDuty = 0.02

// Store is the part of jobstore.Store the refresher uses.
type Store interface {
	QueueDepths(ctx context.Context) ([]jobstore.QueueDepth, error)
}

// Gauge is where the counts go: pulse_queue_depth{topic,status}, replaced
// whole by each count (a metrics.TopicGauge: the topics beyond
// PULSE_METRICS_MAX_TOPICS summed under _other, a topic with no live job
// deleted), and when and in how long they were last counted.
type Gauge interface {
	ReplaceQueueDepth(samples []metrics.TopicSample)
	QueueDepthCounted(at time.Time, took time.Duration)
}

// statuses are the live statuses: a topic the count finds has a series
// for each, 0 for those it has no job in.
var statuses = []string{string(pulsetype.StatusPending), string(pulsetype.StatusRetrying), string(pulsetype.StatusRunning)}

// Refresher recounts the live jobs by topic and status, one Refresh per
// tick of its loop (one at a time: it is not safe for concurrent use).
type Refresher struct {
	store Store
	gauge Gauge
	now   func() time.Time

	// began and took are the last count's start and duration, successful
	// or not: a count that timed out cost as much as one that finished.
	began time.Time
	took  time.Duration
}

// New builds the refresher.
func New(store Store, gauge Gauge) *Refresher {
	return &Refresher{store: store, gauge: gauge, now: time.Now}
}

// Refresh counts once and replaces the gauge: a topic with live jobs has
// one series per live status (0 for a status it has none in), a topic
// without any has none. It does nothing while the last count's cost rules it out
// (MaxDuty).
func (r *Refresher) Refresh(ctx context.Context) error {
	start := r.now()
	if !r.began.IsZero() && start.Sub(r.began) < time.Duration(float64(r.took)/MaxDuty) {
		return nil
	}
	depths, err := r.store.QueueDepths(ctx)
	r.began, r.took = start, r.now().Sub(start)
	if err != nil {
		return err
	}
	jobs := make(map[[2]string]float64, len(depths))
	var topics []string
	for _, d := range depths {
		if _, seen := jobs[[2]string{d.Topic, statuses[0]}]; !seen {
			topics = append(topics, d.Topic)
			for _, st := range statuses {
				jobs[[2]string{d.Topic, st}] += 0
			}
		}
		jobs[[2]string{d.Topic, string(d.Status)}] += float64(d.Jobs)
	}
	samples := make([]metrics.TopicSample, 0, len(topics)*len(statuses))
	for _, t := range topics {
		for _, st := range statuses {
			samples = append(samples, metrics.TopicSample{Topic: t, Labels: []string{st}, Value: jobs[[2]string{t, st}]})
		}
	}
	r.gauge.ReplaceQueueDepth(samples)
	r.gauge.QueueDepthCounted(start, r.took)
	return nil
}
