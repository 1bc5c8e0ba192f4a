package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Lanes are a gateway's claim loops (ADR-0064): n Dispatchers sharing one
// Registry, each claiming for the worker groups assigned to it. A group
// belongs to one lane at a time, so a lane's claims keep everything a
// single loop had — one claim in flight per group, its cursor, its
// cooldown, its backoffs — while a slow claim of one group (a busy topic's
// large batch, a rescan under an old snapshot) no longer holds up the
// claims of groups in other lanes. A new group goes to the lane with the
// fewest groups; a group whose workers all left is forgotten at the next
// poll tick and assigned afresh if it comes back.
//
// Wakes (JobsReady, TopicReady) go to every lane: each keeps its own
// record of what may be ready. A credit goes to its group's lane only.
type Lanes struct {
	registry *Registry
	lanes    []*Dispatcher
	poll     time.Duration

	mu    sync.Mutex
	owner map[string]int // group key → lane
	load  []int          // groups per lane
}

// NewLanes builds n claim loops (at least one) over one registry; call Run
// to start them.
func NewLanes(n int, cfg DispatcherConfig, claimer Claimer, observer Observer, logger *slog.Logger) *Lanes {
	n = max(n, 1)
	l := &Lanes{poll: cfg.PollInterval, owner: map[string]int{}, load: make([]int, n)}
	l.registry = NewRegistry(l.slotsFreed)
	for i := range n {
		lg := logger
		if n > 1 {
			lg = logger.With("lane", i)
		}
		d := newDispatcher(cfg, claimer, observer, lg)
		d.registry = l.registry
		d.owns = func(groupKey string) bool { return l.laneOf(groupKey) == i }
		l.lanes = append(l.lanes, d)
	}
	return l
}

// Registry is the set of connected workers the lanes serve.
func (l *Lanes) Registry() *Registry { return l.registry }

// SetObserver sets who is told about claims; call before Run.
func (l *Lanes) SetObserver(o Observer) {
	for _, d := range l.lanes {
		d.SetObserver(o)
	}
}

// SetGate sets the pause gate every lane consults; call before Run.
func (l *Lanes) SetGate(g Gate) {
	for _, d := range l.lanes {
		d.SetGate(g)
	}
}

// JobsReady is Dispatcher.JobsReady for every lane.
func (l *Lanes) JobsReady() {
	for _, d := range l.lanes {
		d.JobsReady()
	}
}

// TopicReady is Dispatcher.TopicReady for every lane.
func (l *Lanes) TopicReady(payload string) {
	for _, d := range l.lanes {
		d.TopicReady(payload)
	}
}

// Run runs every lane until ctx is done, and forgets the lanes of groups
// whose workers have all left at each poll tick.
func (l *Lanes) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, d := range l.lanes {
		wg.Go(func() { d.Run(ctx) })
	}
	if len(l.lanes) > 1 {
		ticker := time.NewTicker(l.poll)
	prune:
		for {
			select {
			case <-ctx.Done():
				break prune
			case <-ticker.C:
				l.forgetLeft(l.registry.GroupKeys())
			}
		}
		ticker.Stop()
	}
	wg.Wait()
}

// laneOf is the lane that claims for groupKey, assigning one (the lane
// with the fewest groups) the first time the group is seen.
func (l *Lanes) laneOf(groupKey string) int {
	if len(l.lanes) == 1 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.owner[groupKey]; ok {
		return i
	}
	i := 0
	for j, n := range l.load {
		if n < l.load[i] {
			i = j
		}
	}
	l.owner[groupKey] = i
	l.load[i]++
	return i
}

// forgetLeft drops the assignments of groups not among present (the
// groups that still have workers). A group forgotten while a claim of its
// old lane is in flight may be claimed by two lanes for that moment: both
// claims skip what the other locked, as two gateways' do.
func (l *Lanes) forgetLeft(present map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, i := range l.owner {
		if !present[key] {
			delete(l.owner, key)
			l.load[i]--
		}
	}
}

func (l *Lanes) slotsFreed(groupKey string) {
	l.lanes[l.laneOf(groupKey)].slotsFreed(groupKey)
}
