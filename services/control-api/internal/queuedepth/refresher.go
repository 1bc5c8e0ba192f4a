package queuedepth

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// IntervalDefault is how often the depth is recounted.
const IntervalDefault = 5 * time.Second

// Store is the part of jobstore.Store the refresher uses.
type Store interface {
	QueueDepths(ctx context.Context) ([]jobstore.QueueDepth, error)
}

// Gauge is where the counts go: pulse_queue_depth{topic,status}.
type Gauge interface {
	SetQueueDepth(topic, status string, jobs float64)
}

// Refresher recounts the live jobs by topic and status on every tick.
type Refresher struct {
	store    Store
	gauge    Gauge
	interval time.Duration
	logger   *slog.Logger

	// seen holds every (topic, status) ever reported, so a group that
	// empties is set to 0 rather than left at its last count.
	seen map[[2]string]bool

	cancel context.CancelFunc
	done   sync.WaitGroup
}

// New builds the refresher; interval 0 means IntervalDefault.
func New(store Store, gauge Gauge, interval time.Duration, logger *slog.Logger) *Refresher {
	if interval <= 0 {
		interval = IntervalDefault
	}
	return &Refresher{store: store, gauge: gauge, interval: interval,
		logger: logger.With(logging.Loop, "queue_depth"), seen: map[[2]string]bool{}}
}

// Start counts once at once, then on every tick, until Stop.
func (r *Refresher) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done.Go(func() { r.run(ctx) })
}

// Stop ends the loop, abandoning a count in flight.
func (r *Refresher) Stop() {
	if r.cancel != nil {
		r.cancel()
	}
	r.done.Wait()
}

func (r *Refresher) run(ctx context.Context) {
	ticker := time.NewTicker(r.interval)
	defer ticker.Stop()
	for {
		if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
			r.logger.Warn("queue depth count failed; retrying on the next tick", logging.Error, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
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
