package queuedepth

import (
	"context"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// IntervalDefault is how often the depth is recounted (the app runs
// Refresh on a pkg/server/loop every PULSE_QUEUE_DEPTH_INTERVAL).
const IntervalDefault = 5 * time.Second

// Store is the part of jobstore.Store the refresher uses.
type Store interface {
	QueueDepths(ctx context.Context) ([]jobstore.QueueDepth, error)
}

// Gauge is where the counts go: pulse_queue_depth{topic,status}.
type Gauge interface {
	SetQueueDepth(topic, status string, jobs float64)
}

// Refresher recounts the live jobs by topic and status, one Refresh per
// tick of its loop (one at a time: it is not safe for concurrent use).
type Refresher struct {
	store Store
	gauge Gauge

	// seen holds every (topic, status) ever reported, so a group that
	// empties is set to 0 rather than left at its last count.
	seen map[[2]string]bool
}

// New builds the refresher.
func New(store Store, gauge Gauge) *Refresher {
	return &Refresher{store: store, gauge: gauge, seen: map[[2]string]bool{}}
}

// Refresh counts once and sets the gauge; groups seen before and now empty
// go to 0.
func (r *Refresher) Refresh(ctx context.Context) error {
	depths, err := r.store.QueueDepths(ctx)
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
	return nil
}
