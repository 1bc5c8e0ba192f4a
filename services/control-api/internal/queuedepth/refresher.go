package queuedepth

import (
	"context"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// IntervalDefault is how often the depth is recounted (the app runs
// Refresh on a pkg/server/loop every PULSE_QUEUE_DEPTH_INTERVAL).
const IntervalDefault = 5 * time.Second

// MaxDuty is the largest share of time the count may keep a Postgres
// backend busy. The count is O(live jobs): measured on a two-core machine,
// 0.16 s with a 200,000-job backlog draining and about 0.4 s for a
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

// Gauge is where the counts go: pulse_queue_depth{topic,status}, and when
// and in how long they were last counted.
type Gauge interface {
	SetQueueDepth(topic, status string, jobs float64)
	QueueDepthCounted(at time.Time, took time.Duration)
}

// Refresher recounts the live jobs by topic and status, one Refresh per
// tick of its loop (one at a time: it is not safe for concurrent use).
type Refresher struct {
	store Store
	gauge Gauge
	now   func() time.Time

	// seen holds every (topic, status) ever reported, so a group that
	// empties is set to 0 rather than left at its last count.
	seen map[[2]string]bool
	// began and took are the last count's start and duration, successful
	// or not: a count that timed out cost as much as one that finished.
	began time.Time
	took  time.Duration
}

// New builds the refresher.
func New(store Store, gauge Gauge) *Refresher {
	return &Refresher{store: store, gauge: gauge, now: time.Now, seen: map[[2]string]bool{}}
}

// Refresh counts once and sets the gauge; groups seen before and now empty
// go to 0. It does nothing while the last count's cost rules it out
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
	now := make(map[[2]string]bool, len(depths))
	for _, d := range depths {
		k := [2]string{d.Topic, string(d.Status)}
		now[k] = true
		r.seen[k] = true
		r.gauge.SetQueueDepth(d.Topic, string(d.Status), float64(d.Jobs))
	}
	for k := range r.seen {
		if !now[k] {
			r.gauge.SetQueueDepth(k[0], k[1], 0)
		}
	}
	r.gauge.QueueDepthCounted(start, r.took)
	return nil
}
