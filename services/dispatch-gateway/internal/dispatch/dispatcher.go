package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// Claimer is the claim statement (jobstore.Store.Claim).
type Claimer interface {
	Claim(ctx context.Context, topics []string, slots []string, leaseTTL time.Duration) ([]jobstore.Claimed, error)
}

// Observer is told what each claim did, for metrics.
type Observer interface {
	Claimed(took time.Duration, requested int, jobs []jobstore.Claimed, err error)
	Undeliverable(jobs []jobstore.Claimed)
	// ClaimsPaused counts a wake-up that issued no claim because dispatch
	// is globally paused.
	ClaimsPaused()
}

// Gate is the in-memory pause state (pause.Gate). Pause is enforced by the
// claim statement; the gate only spares the database claims that could
// take nothing.
type Gate interface {
	// GloballyPaused: no claim queries at all (seed ADR-0010).
	GloballyPaused() bool
	// Blocks: every topic of a group is paused, so its claim is skipped.
	Blocks(topics []string) bool
}

// DispatcherConfig tunes the loop.
type DispatcherConfig struct {
	LeaseTTL time.Duration
	// PollInterval bounds what a lost NOTIFY can cost.
	PollInterval time.Duration
	// Batch is the most jobs one claim statement takes.
	Batch int
}

// Dispatcher is the gateway's single claim loop. It claims when there are
// free slots and there may be work: after a NOTIFY, on every poll tick, and
// for as long as claims come back full. A claim that comes back short means
// the group's queue is empty, so later credits from that group's workers do
// not cause claims until the next NOTIFY or tick; that is what keeps a
// thousand idle workers from costing a thousand queries.
type Dispatcher struct {
	cfg      DispatcherConfig
	registry *Registry
	claimer  Claimer
	observer Observer
	gate     Gate
	logger   *slog.Logger

	wake chan struct{}

	mu sync.Mutex
	// epoch counts "jobs may be ready" events (NOTIFY, poll tick).
	epoch uint64
	// drained maps a group whose claim came back short to the epoch the
	// claim started in. The group is idle only while no newer event came:
	// a NOTIFY that lands during a claim is never lost.
	drained map[string]uint64
	// backoffUntil pauses claiming after a claim error.
	backoffUntil time.Time
}

// NewDispatcher builds the loop; call Run to start it.
func NewDispatcher(cfg DispatcherConfig, claimer Claimer, observer Observer, logger *slog.Logger) *Dispatcher {
	d := &Dispatcher{
		cfg:      cfg,
		claimer:  claimer,
		observer: observer,
		logger:   logger.With("loop", "dispatcher"),
		wake:     make(chan struct{}, 1),
		drained:  map[string]uint64{},
	}
	d.registry = NewRegistry(d.slotsFreed)
	return d
}

// SetObserver sets who is told about claims; call before Run.
func (d *Dispatcher) SetObserver(o Observer) { d.observer = o }

// SetGate sets the pause gate consulted before every claim; call before
// Run. Without one the dispatcher claims as if nothing were paused (the
// claim statement still enforces pause).
func (d *Dispatcher) SetGate(g Gate) { d.gate = g }

// Registry is the set of connected workers this loop serves.
func (d *Dispatcher) Registry() *Registry { return d.registry }

// JobsReady says new jobs may be claimable (an insert NOTIFY, a missed
// notification after a reconnect): every group may have work again.
func (d *Dispatcher) JobsReady() {
	d.forgetDrained()
	d.signal()
}

func (d *Dispatcher) forgetDrained() {
	d.mu.Lock()
	d.epoch++
	d.mu.Unlock()
}

func (d *Dispatcher) slotsFreed(groupKey string) {
	d.mu.Lock()
	idle := d.isDrained(groupKey)
	d.mu.Unlock()
	if !idle {
		d.signal()
	}
}

// isDrained must be called with mu held.
func (d *Dispatcher) isDrained(groupKey string) bool {
	e, ok := d.drained[groupKey]
	return ok && e == d.epoch
}

func (d *Dispatcher) currentEpoch() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.epoch
}

func (d *Dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) mayHaveWork(groupKey string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.isDrained(groupKey) && time.Now().After(d.backoffUntil)
}

// Run claims until ctx is done.
func (d *Dispatcher) Run(ctx context.Context) {
	ticker := time.NewTicker(d.cfg.PollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-ticker.C:
			d.forgetDrained()
		}
		d.drain(ctx)
	}
}

// drain claims for every group with free slots and possible work, again
// and again while claims come back full.
func (d *Dispatcher) drain(ctx context.Context) {
	for ctx.Err() == nil {
		if d.gate != nil && d.gate.GloballyPaused() {
			if d.observer != nil {
				d.observer.ClaimsPaused()
			}
			return // resume calls JobsReady
		}
		groups := d.registry.Reserve(d.mayHaveWork, d.cfg.Batch)
		if len(groups) == 0 {
			return
		}
		full := false
		epoch := d.currentEpoch()
		for _, g := range groups {
			if d.gate != nil && d.gate.Blocks(g.Topics) {
				// Every topic of the group is paused: give the slots back
				// and rest until the next change or tick.
				d.registry.Settle(g, nil)
				d.mu.Lock()
				d.drained[g.Key] = epoch
				d.mu.Unlock()
				continue
			}
			start := time.Now()
			claimed, err := d.claimer.Claim(ctx, g.Topics, g.Slots, d.cfg.LeaseTTL)
			took := time.Since(start)
			if d.observer != nil {
				d.observer.Claimed(took, len(g.Slots), claimed, err)
			}
			if lost := d.registry.Settle(g, claimed); len(lost) > 0 {
				d.logger.Warn("claimed jobs whose stream closed before delivery; their leases will lapse and the reaper retries them", "jobs", len(lost))
				if d.observer != nil {
					d.observer.Undeliverable(lost)
				}
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// A claim error keeps every stream (seed ADR-0005): back off
				// and let the next poll tick try again.
				d.logger.Error("claim failed; retrying on the next poll", "error", err)
				d.mu.Lock()
				d.backoffUntil = time.Now().Add(d.cfg.PollInterval / 2)
				d.mu.Unlock()
				return
			}
			if len(claimed) < len(g.Slots) {
				d.mu.Lock()
				d.drained[g.Key] = epoch
				d.mu.Unlock()
			} else {
				full = true
			}
		}
		if !full {
			return
		}
	}
}
