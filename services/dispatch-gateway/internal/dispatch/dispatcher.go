package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/backoff"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"
)

// A failed claim backs off only what failed — the group, or after a data
// error the one topic — exponentially from claimBackoffMin to
// claimBackoffMax; every other group is served in the same pass.
const (
	claimBackoffMin = 100 * time.Millisecond
	claimBackoffMax = 5 * time.Second
)

// claimRetry is that schedule. No jitter: one gateway's keys need no
// spreading, and operators read the delays off the log ("retry_in").
var claimRetry = backoff.Policy{Initial: claimBackoffMin, Max: claimBackoffMax}

// Reasons a claim statement failed, for logs and the
// pulse_gateway_claim_errors_total metric: few and fixed.
const (
	// ClaimErrorData: Postgres refused the statement's data (SQLSTATE
	// class 22 or 23), e.g. a row it cannot move to RUNNING.
	ClaimErrorData = "data"
	// ClaimErrorUnavailable: the database could not be reached, is
	// shutting down, or rolled the statement back on its own (a lock
	// wait past lock_timeout, a deadlock).
	ClaimErrorUnavailable = "unavailable"
	// ClaimErrorOther: anything else.
	ClaimErrorOther = "other"
)

// ClaimErrorReason classifies a claim error as one of the ClaimError
// reasons.
func ClaimErrorReason(err error) string {
	switch {
	case jobstore.IsDataError(err):
		return ClaimErrorData
	case apierr.KindOf(err) == apierr.KindUnavailable, errors.Is(err, jobstore.ErrStatementTimeout):
		// A claim past its statement timeout: the database is too slow.
		return ClaimErrorUnavailable
	}
	return ClaimErrorOther
}

// Claimer is the claim statement (jobstore.Store.Claim), from the head of
// the queue, or around a cursor: resuming after it
// (jobstore.Store.ClaimAfter) or rescanning before it first
// (jobstore.Store.ClaimBefore).
type Claimer interface {
	Claim(ctx context.Context, topics []string, slots []string, leaseTTL time.Duration) ([]pulsetype.Claimed, error)
	ClaimAfter(ctx context.Context, topics []string, slots []string, leaseTTL time.Duration, after jobstore.ClaimCursor) ([]pulsetype.Claimed, error)
	ClaimBefore(ctx context.Context, topics []string, slots []string, leaseTTL time.Duration, at jobstore.ClaimCursor) ([]pulsetype.Claimed, error)
}

// RateWaiter is the side of a Claimer that knows when rate-limited
// topics next have room (jobstore.Store.RateWaits, ADR-0051): after a
// claim comes back short, the dispatcher leaves each topic it names out
// of its claims until then, instead of claiming it at every wake-up and
// tick. It reads memory only.
type RateWaiter interface {
	RateWaits(topics []string) map[string]jobstore.RateWait
}

// Observer is told what each claim did, for metrics.
type Observer interface {
	// Claimed: a claim that started from (ClaimFromHead, ClaimFromCursor,
	// ClaimRescan) lasted took and returned jobs or err.
	Claimed(took time.Duration, from string, jobs []pulsetype.Claimed, err error)
	// ClaimedBehind: of the jobs a lookback or a rescan (from) took, n
	// sorted before the group's cursor less jobstore.ClaimSkewMargin:
	// their inserts committed later than a claim resuming there allows
	// for (ADR-0063).
	ClaimedBehind(from string, n int)
	Undeliverable(jobs []pulsetype.Claimed)
	// ClaimsPaused counts a wake-up that issued no claim because dispatch
	// is globally paused.
	ClaimsPaused()
}

// Gate is the in-memory pause state (pause.Gate). Pause is enforced by the
// claim statement; the gate only spares the database claims that could
// take nothing.
type Gate interface {
	// GloballyPaused: no claim queries at all (ADR-0007).
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
	// ClaimCooldown is how long the groups whose claims came back full (a
	// backlog: there was more work than free slots) rest, so the slots
	// that free up meanwhile go out in one claim statement instead of a
	// handful each. Zero: claim again at the first credit. A pass that
	// found the queue short (the idle case) never rests, and other groups
	// are claimed during a rest as soon as a wake arrives, so a new job's
	// latency is untouched by another topic's backlog.
	ClaimCooldown time.Duration
	// ClaimRescanInterval is how long a group's claims may resume after
	// the last job its previous claim took (ADR-0022) before one looks
	// before that cursor first: the longest a job sorting before it (a
	// higher priority, a retry come due) waits while the group has a
	// backlog. Zero: every claim starts from the head.
	ClaimRescanInterval time.Duration
}

// Dispatcher is a claim loop: the gateway's only one, or one of its Lanes
// (then it claims for the groups of its lane only). It claims when there are
// free slots and there may be work: after a NOTIFY, on every poll tick, and
// for as long as claims come back full. A claim that comes back short means
// the group's queue is empty, so later credits from that group's workers do
// not cause claims until the next NOTIFY or tick; that is what keeps a
// thousand idle workers from costing a thousand queries.
//
// A claim that fails costs only its own group: it is logged, counted and
// backed off (claimBackoffMin doubling to claimBackoffMax) while the other
// groups are served in the same pass. When Postgres refuses the data of a
// multi-topic group's claim (one row it cannot move to RUNNING fails every
// statement reaching it), the group's topics are claimed one by one, so
// only the topic holding that row backs off — in every group that has it.
type Dispatcher struct {
	cfg      DispatcherConfig
	registry *Registry
	claimer  Claimer
	observer Observer
	gate     Gate
	logger   *slog.Logger
	// owns says which groups this loop claims for; nil: every group. A
	// gateway's lanes (Lanes) share one registry and split its groups.
	owns func(groupKey string) bool
	// resume is where the loop's next reservation starts
	// (Registry.ReserveFrom). Only the loop reads and writes it.
	resume string

	wake chan struct{}

	mu sync.Mutex
	// epoch counts "jobs may be ready" events (NOTIFY, poll tick).
	epoch uint64
	// exhausted maps a group whose claim came back short to the epoch the
	// claim started in. The group is idle only while no newer event came:
	// a NOTIFY that lands during a claim is never lost.
	exhausted map[string]uint64
	// backoff holds, per claim key, when claiming may resume after an
	// error: a group's key, or a topic's name after a data error on that
	// topic alone (a one-topic group's key is its topic). An entry stays
	// until a claim of its key succeeds, so its delay keeps doubling.
	backoff map[string]claimBackoff
	// rateWait holds, per rate-limited topic, when its window next gives
	// room: until then the topic is left out of claims (RateWaiter).
	rateWait map[string]jobstore.RateWait
	// cursors holds, per group whose claims took jobs, where they left
	// off. Only the loop reads and writes it.
	cursors map[string]groupCursor
	// maySortBefore counts the wakes that may be of jobs sorting before a
	// claim cursor: every one but an insert's of new jobs (ADR-0055) or
	// of jobs whose submit time it names (ADR-0063).
	maySortBefore uint64
	// lateFrom holds, per topic, the earliest submit time named by an
	// insert's wake (jobstore.SubmittedReady) since a claim of the topic
	// last took it into account; at most MaxLateTopics topics.
	lateFrom map[string]time.Time
}

// groupCursor is where a group's claims resume, when the group last
// looked before it (a claim from the head, or a rescan), and how long its
// claims may resume before the next rescan (ADR-0050).
type groupCursor struct {
	at        jobstore.ClaimCursor
	scannedAt time.Time
	// rescanGap is the group's rescan interval: ClaimRescanInterval, or
	// RescanCostFactor times what its last rescan took when that is more
	// (a walk made long by an old snapshot), at most MaxRescanGap.
	rescanGap time.Duration
	// sortsBeforeSeen is Dispatcher.maySortBefore as it was when the
	// group last looked before its cursor (from the head or a rescan).
	sortsBeforeSeen uint64
}

// The rescan's schedule (ADR-0050).
const (
	// RescanCostFactor keeps rescans below about 1/RescanCostFactor of a
	// group's claiming time: a rescan that took t waits this many t.
	RescanCostFactor = 20
	// MaxRescanGap is the longest a job sorting before a group's cursor
	// (a retry come due, a higher priority, a resumed topic) can wait
	// while the group claims around it.
	MaxRescanGap = 30 * time.Second
	// MaxLookback is how far before its cursor a group's claim starts
	// when a wake names jobs submitted there (ADR-0063): its walk steps
	// over the jobs claimed since, so an insert later than this is left
	// to a rescan, as any wake of jobs that may sort before the cursor.
	MaxLookback = 5 * time.Second
	// MaxLateTopics bounds the topics whose late wakes a dispatcher
	// remembers; a wake past it counts as one of jobs that may sort
	// before a cursor.
	MaxLateTopics = 1024
)

// gap is the cursor's rescan interval given the configured one.
func (c groupCursor) gap(configured time.Duration) time.Duration {
	return max(configured, c.rescanGap)
}

type claimBackoff struct {
	until    time.Time
	failures int
}

// NewDispatcher builds the loop; call Run to start it.
func NewDispatcher(cfg DispatcherConfig, claimer Claimer, observer Observer, logger *slog.Logger) *Dispatcher {
	d := newDispatcher(cfg, claimer, observer, logger)
	d.registry = NewRegistry(d.slotsFreed)
	return d
}

// newDispatcher is NewDispatcher without a registry.
func newDispatcher(cfg DispatcherConfig, claimer Claimer, observer Observer, logger *slog.Logger) *Dispatcher {
	return &Dispatcher{
		cfg:       cfg,
		claimer:   claimer,
		observer:  observer,
		logger:    logger.With("loop", "dispatcher"),
		wake:      make(chan struct{}, 1),
		exhausted: map[string]uint64{},
		backoff:   map[string]claimBackoff{},
		rateWait:  map[string]jobstore.RateWait{},
		cursors:   map[string]groupCursor{},
		lateFrom:  map[string]time.Time{},
	}
}

// SetObserver sets who is told about claims; call before Run.
func (d *Dispatcher) SetObserver(o Observer) { d.observer = o }

// SetGate sets the pause gate consulted before every claim; call before
// Run. Without one the dispatcher claims as if nothing were paused (the
// claim statement still enforces pause).
func (d *Dispatcher) SetGate(g Gate) { d.gate = g }

// Registry is the set of connected workers this loop serves.
func (d *Dispatcher) Registry() *Registry { return d.registry }

// JobsReady says jobs may be claimable, wherever they sort (a resume, a
// missed notification after a reconnect): every group may have work
// again, and a claim that finds nothing after its cursor looks before it.
func (d *Dispatcher) JobsReady() {
	d.mu.Lock()
	d.maySortBefore++
	d.mu.Unlock()
	d.forgetExhausted()
	d.signal()
}

// TopicReady is JobsReady for a pulse_jobs_ready notification whose
// payload names what changed: jobs of a topic submitted at a given time
// (jobstore.SubmittedReady), which a group whose cursor is past that time
// claims from there (ADR-0063); new jobs of a topic (jobstore.NewJobsReady
// at its end), which sort after every cursor; a topic whose jobs may be
// ready wherever they sort (a plain topic); or a topic's limits
// (jobstore.RateLimitsChanged at its end). A change of limits ends the
// topic's rate wait; so does a job of a topic limited per key, which
// another key may have room for. A topic limited as a whole keeps
// waiting: nothing of it can start before its window opens.
func (d *Dispatcher) TopicReady(payload string) {
	topic, at, timed := jobstore.ReadyAt(payload)
	fresh := timed
	if !timed {
		topic, fresh = strings.CutSuffix(payload, jobstore.NewJobsReady)
	}
	topic, limits := strings.CutSuffix(topic, jobstore.RateLimitsChanged)
	d.mu.Lock()
	if w, ok := d.rateWait[topic]; ok && (limits || w.Keyed) {
		delete(d.rateWait, topic)
	}
	if timed && !d.noteLate(topic, at) {
		fresh = false // no room to remember it: leave it to a rescan
	}
	if !fresh {
		d.maySortBefore++
	}
	d.mu.Unlock()
	d.forgetExhausted()
	d.signal()
}

func (d *Dispatcher) sortsBeforeCount() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.maySortBefore
}

// takeLate removes the submit times wakes named for topics and returns
// the earliest; ok is false when there was none.
func (d *Dispatcher) takeLate(topics []string) (earliest time.Time, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range topics {
		at, found := d.lateFrom[t]
		if !found {
			continue
		}
		delete(d.lateFrom, t)
		if !ok || at.Before(earliest) {
			earliest, ok = at, true
		}
	}
	return earliest, ok
}

// lateSince records at as the earliest submit time waiting for topics'
// claims, where it is earlier than what waits already.
func (d *Dispatcher) lateSince(topics []string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range topics {
		d.noteLate(t, at)
	}
}

// noteLate records at as the earliest submit time waiting for topic's
// claims, unless an earlier one waits already; false when lateFrom is
// full. mu must be held.
func (d *Dispatcher) noteLate(topic string, at time.Time) bool {
	prev, waiting := d.lateFrom[topic]
	switch {
	case waiting && !at.Before(prev):
	case waiting || len(d.lateFrom) < MaxLateTopics:
		d.lateFrom[topic] = at
	default:
		return false
	}
	return true
}

// lookBack says whether a wake's late submit time sorts before where a
// claim resuming after cur starts (ClaimSkewMargin before it): back when
// it does, at most MaxLookback before the cursor, so the claim may start
// at late within the cursor's priority, before every job submitted at
// that instant (ADR-0063); far when it is further back than that, and
// the jobs are left to a rescan.
func lookBack(cur jobstore.ClaimCursor, late time.Time) (back, far bool) {
	if !late.Before(cur.Back(jobstore.ClaimSkewMargin).SubmittedAt) {
		return false, false
	}
	if cur.SubmittedAt.Sub(late) > MaxLookback {
		return false, true
	}
	return true, false
}

// behind counts the jobs that sort before at.
func behind(jobs []pulsetype.Claimed, at jobstore.ClaimCursor) int {
	n := 0
	for _, j := range jobs {
		if (jobstore.ClaimCursor{Priority: j.Priority, SubmittedAt: j.SubmittedAt, ID: j.ID}).Before(at) {
			n++
		}
	}
	return n
}

// rateWaiting must be called with mu held.
func (d *Dispatcher) rateWaiting(topic string, now time.Time) bool {
	w, ok := d.rateWait[topic]
	return ok && now.Before(w.Until)
}

// learnRateWaits records, after a short claim of topics, which of them
// are at their rate limit and until when.
func (d *Dispatcher) learnRateWaits(topics []string) {
	rw, ok := d.claimer.(RateWaiter)
	if !ok {
		return
	}
	waits := rw.RateWaits(topics)
	if len(waits) == 0 {
		return
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for t, w := range waits {
		if w.Until.After(now) {
			d.rateWait[t] = w
		}
	}
}

func (d *Dispatcher) forgetExhausted() {
	d.mu.Lock()
	d.epoch++
	d.mu.Unlock()
}

func (d *Dispatcher) slotsFreed(groupKey string) {
	d.mu.Lock()
	idle := d.isExhausted(groupKey)
	d.mu.Unlock()
	if !idle {
		d.signal()
	}
}

// isExhausted must be called with mu held.
func (d *Dispatcher) isExhausted(groupKey string) bool {
	e, ok := d.exhausted[groupKey]
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
	if d.isExhausted(groupKey) {
		return false
	}
	if len(d.backoff) == 0 && len(d.rateWait) == 0 {
		return true
	}
	now := time.Now()
	if d.backedOff(groupKey, now) {
		return false
	}
	for _, t := range strings.Split(groupKey, "\x00") {
		if !d.backedOff(t, now) && !d.rateWaiting(t, now) {
			return true
		}
	}
	return false
}

// backedOff must be called with mu held.
func (d *Dispatcher) backedOff(key string, now time.Time) bool {
	b, ok := d.backoff[key]
	return ok && now.Before(b.until)
}

// claimable returns the topics of g not backed off, nor waiting for
// their rate limit's window, right now.
func (d *Dispatcher) claimable(g Group) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.backoff) == 0 && len(d.rateWait) == 0 {
		return g.Topics
	}
	now := time.Now()
	var out []string
	for _, t := range g.Topics {
		if !d.backedOff(t, now) && !d.rateWaiting(t, now) {
			out = append(out, t)
		}
	}
	return out
}

// failed backs key off and returns for how long.
func (d *Dispatcher) failed(key string) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	b, ok := d.backoff[key]
	if !ok || now.Sub(b.until) > claimBackoffMax {
		// First failure, or the first after a long quiet: start over.
		b.failures = 0
	}
	b.failures++
	delay := claimRetry.Delay(b.failures)
	b.until = now.Add(delay)
	d.backoff[key] = b
	return delay
}

// succeeded clears the backoff of a claim that went through: its key's
// and its topics'.
func (d *Dispatcher) succeeded(key string, topics []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.backoff) == 0 {
		return
	}
	delete(d.backoff, key)
	for _, t := range topics {
		delete(d.backoff, t)
	}
}

// nextRetry is when the earliest backoff or rate wait ends, if any is
// running. Entries long expired (their key no longer claimed) are dropped
// here, and rate waits as soon as they end.
func (d *Dispatcher) nextRetry() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	var next time.Time
	for k, b := range d.backoff {
		switch {
		case now.Sub(b.until) > claimBackoffMax:
			delete(d.backoff, k)
		case b.until.After(now) && (next.IsZero() || b.until.Before(next)):
			next = b.until
		}
	}
	for t, w := range d.rateWait {
		switch {
		case !w.Until.After(now):
			delete(d.rateWait, t)
		case next.IsZero() || w.Until.Before(next):
			next = w.Until
		}
	}
	return next, !next.IsZero()
}

// Run claims until ctx is done.
func (d *Dispatcher) Run(ctx context.Context) {
	ticker := time.NewTicker(d.cfg.PollInterval)
	defer ticker.Stop()
	// retry fires when a claim backoff ends, so a backed-off group or topic
	// is claimed again then, not at the next tick.
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	cooldown := time.NewTimer(time.Hour)
	cooldown.Stop()
	defer cooldown.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-ticker.C:
			d.forgetExhausted()
			d.forgetCursors()
		case <-retry.C:
			// A group may have been marked exhausted while one of its topics
			// was backed off: let every group look again.
			d.forgetExhausted()
		}
		full := d.claimRound(ctx, nil)
		if next, ok := d.nextRetry(); ok {
			retry.Reset(time.Until(next))
		} else {
			retry.Stop()
		}
		if len(full) == 0 || d.cfg.ClaimCooldown <= 0 {
			continue
		}
		// The groups whose claims came back full rest for the cooldown, so
		// the slots their workers free meanwhile go out in one claim. A
		// wake meanwhile still claims for every other group at once: a
		// quiet topic's new job does not wait for a busy topic's rest.
		// The wake is passed on when the rest ends, for the groups that
		// rested through it.
		cooldown.Reset(d.cfg.ClaimCooldown)
		woken := false
		for resting := true; resting; {
			select {
			case <-ctx.Done():
				return
			case <-cooldown.C:
				resting = false
			case <-d.wake:
				woken = true
				maps.Copy(full, d.claimRound(ctx, full))
			}
		}
		if woken {
			d.signal()
		}
	}
}

// claimRound claims for every group with free slots and possible work,
// except the resting ones: one pass reserves slots and claims for each
// reserved group, and the round runs another pass at once while claims
// come back full and the pass's reservation was capped at one batch. A
// group whose claim comes back short is marked exhausted until the next
// "jobs may be ready" event; a group whose claim fails is backed off and
// the pass goes on with the others. It returns the groups whose claims
// came back full (their queues held more than the free slots took), nil
// when none did.
func (d *Dispatcher) claimRound(ctx context.Context, resting map[string]bool) (full map[string]bool) {
	wanted := func(groupKey string) bool {
		return !resting[groupKey] && (d.owns == nil || d.owns(groupKey)) && d.mayHaveWork(groupKey)
	}
	for ctx.Err() == nil {
		if d.gate != nil && d.gate.GloballyPaused() {
			if d.observer != nil {
				d.observer.ClaimsPaused()
			}
			return full // resume calls JobsReady
		}
		var groups []Group
		groups, d.resume = d.registry.ReserveFrom(wanted, d.cfg.Batch, d.resume)
		if len(groups) == 0 {
			return full
		}
		reserved := 0
		for _, g := range groups {
			reserved += len(g.Slots)
		}
		passFull := false
		epoch := d.currentEpoch()
		for i, g := range groups {
			if ctx.Err() != nil {
				// Shutting down: give the slots back unclaimed.
				for _, rest := range groups[i:] {
					d.registry.Settle(rest, nil)
				}
				return full
			}
			if d.gate != nil && d.gate.Blocks(g.Topics) {
				// Every topic of the group is paused: give the slots back
				// and rest until the next change or tick.
				d.registry.Settle(g, nil)
				d.mu.Lock()
				d.exhausted[g.Key] = epoch
				d.mu.Unlock()
				continue
			}
			claimed := d.claimGroup(ctx, g)
			if lost := d.registry.Settle(g, claimed); len(lost) > 0 {
				d.logger.Warn("claimed jobs whose stream closed before delivery; their leases will lapse and the reaper retries them", "jobs", len(lost))
				if d.observer != nil {
					d.observer.Undeliverable(lost)
				}
			}
			if len(claimed) < len(g.Slots) {
				// Short (or failed: then backed off, and the end of the
				// backoff lets every group look again). A topic at its
				// rate limit sleeps until its window opens.
				d.learnRateWaits(g.Topics)
				d.mu.Lock()
				d.exhausted[g.Key] = epoch
				d.mu.Unlock()
			} else {
				if full == nil {
					full = map[string]bool{}
				}
				full[g.Key], passFull = true, true
			}
		}
		// Claims came back full. Claim again at once only when this pass
		// reserved a whole batch, so slots it could not take are already
		// free; otherwise return, and Run rests for the cooldown, so the
		// slots freed while these claims ran and during the rest go out in
		// one claim instead of a handful each.
		if !passFull || reserved < d.cfg.Batch {
			return full
		}
	}
	return full
}

// claimGroup claims for g's slots from its topics that are not backed off.
// A claim error keeps every stream: it is logged, counted
// (the observer) and backed off for g alone — or, when Postgres refused
// the data of a multi-topic claim, the topics are claimed one by one and
// only a topic whose own claim fails backs off.
func (d *Dispatcher) claimGroup(ctx context.Context, g Group) []pulsetype.Claimed {
	topics := d.claimable(g)
	if len(topics) == 0 {
		return nil
	}
	claimed, err := d.claimNext(ctx, g, topics)
	if err == nil {
		d.succeeded(g.Key, topics)
		return claimed
	}
	if ctx.Err() != nil {
		return nil
	}
	reason := ClaimErrorReason(err)
	if reason != ClaimErrorData || len(topics) == 1 {
		key := g.Key
		if len(topics) == 1 {
			key = topics[0]
		}
		delay := d.failed(key)
		d.logger.Error("claim failed; backing off these topics, serving the others", "topics", topics, "reason", reason,
			"retry_in", delay, "error", err)
		return nil
	}
	d.logger.Warn("claim refused by the database; claiming these topics one by one to find the one at fault",
		"topics", topics, "error", err)
	claimed, slots := nil, g.Slots
	// A random first topic: when the first claim fills every slot, the
	// topics after it stay untested, and the group's next claim fails and
	// splits again.
	start := rand.IntN(len(topics))
	for i := range topics {
		if len(slots) == 0 {
			break
		}
		t := topics[(start+i)%len(topics)]
		got, err := d.claim(ctx, []string{t}, slots, ClaimFromHead, jobstore.ClaimCursor{})
		if err != nil {
			if ctx.Err() != nil {
				return claimed
			}
			reason := ClaimErrorReason(err)
			key := t
			if reason != ClaimErrorData {
				key = g.Key // not this topic's fault: back the group off
			}
			delay := d.failed(key)
			d.logger.Error("claim failed; backing off, serving the others", "topics", []string{t}, "reason", reason,
				"retry_in", delay, "error", err)
			if reason != ClaimErrorData {
				return claimed
			}
			continue
		}
		d.succeeded(t, nil)
		claimed = append(claimed, got...)
		slots = slots[len(got):]
	}
	return claimed
}

// claimNext claims for g's slots around the group's cursor (ADR-0022,
// ADR-0050) once a claim of the group took jobs and while all its topics
// are claimable: resuming after the cursor (ClaimSkewMargin before it),
// or, once the group's rescan interval has passed since it last looked
// before it, rescanning before it first; or, when a wake named jobs of the
// group submitted before where that claim would start (an insert that
// committed late, ADR-0063), from that time on (lookBack). A claim that takes jobs leaves
// the cursor at the last job taken (never moving it back: a rescan's jobs
// may all sort before it); a short one keeps it, so a queue that keeps up
// with its producers (every claim short) still claims around its cursor
// instead of walking from the head over every job claimed since the
// oldest open snapshot. A claim after the cursor that takes nothing is
// followed at once by a rescan while rescans are cheap (the interval is
// the configured one) and the group was told, since it last looked
// before its cursor, of jobs that may sort there (anything but an
// insert's new jobs, ADR-0055): a gateway that lost the race for a new
// job to another does not look twice. A rescan sets the interval to the next: the
// configured one, or RescanCostFactor times what it took when that is
// more, at most MaxRescanGap; a rescan that fails keeps the cursor and
// doubles the interval. Any other failure drops the cursor, and so does a
// claim from the head that took nothing.
func (d *Dispatcher) claimNext(ctx context.Context, g Group, topics []string) ([]pulsetype.Claimed, error) {
	now := time.Now()
	late, wokenLate := d.takeLate(topics)
	cur, ok := d.cursors[g.Key]
	from := ClaimFromHead
	switch {
	case !ok || len(topics) != len(g.Topics) || d.cfg.ClaimRescanInterval <= 0:
		cur = groupCursor{scannedAt: now}
	case now.Sub(cur.scannedAt) >= cur.gap(d.cfg.ClaimRescanInterval):
		from, cur.scannedAt = ClaimRescan, now
	default:
		from = ClaimFromCursor
	}
	start := cur.at.Back(jobstore.ClaimSkewMargin)
	if from == ClaimFromCursor && wokenLate {
		// A wake named jobs submitted before where this claim would start:
		// an insert that committed after a claim took later jobs. While
		// rescans are cheap the next one finds them within the configured
		// interval, as it always did; while an old snapshot makes them
		// slow, this claim starts where the jobs are.
		switch back, far := lookBack(cur.at, late); {
		case back && cur.rescanGap > d.cfg.ClaimRescanInterval:
			from, start = ClaimLookback, jobstore.ClaimCursor{Priority: cur.at.Priority, SubmittedAt: late}
		case back || far:
			d.mu.Lock()
			d.maySortBefore++
			d.mu.Unlock()
		}
	}
	told := d.sortsBeforeCount()
	claimed, err := d.claim(ctx, topics, g.Slots, from, start)
	if (from == ClaimRescan || from == ClaimLookback) && err == nil && d.observer != nil {
		d.observer.ClaimedBehind(from, behind(claimed, cur.at.Back(jobstore.ClaimSkewMargin)))
	}
	if from == ClaimLookback && err == nil && len(claimed) == len(g.Slots) {
		// Every slot went to jobs from the lookback on: if they all sort
		// before the cursor, more of that insert's jobs may be left there.
		if last, _ := jobstore.LastClaimed(claimed); last.Before(cur.at) {
			d.lateSince(topics, last.SubmittedAt)
		}
	}
	if from == ClaimFromCursor && err == nil && len(claimed) == 0 &&
		cur.rescanGap <= d.cfg.ClaimRescanInterval && told != cur.sortsBeforeSeen {
		// Nothing follows the cursor, the group was told of jobs that may
		// sort before it (a child its parent's settle released, a retried
		// job), and its rescans are cheap: look there now rather than at
		// the next wake after the interval.
		now = time.Now()
		from, cur.scannedAt = ClaimRescan, now
		claimed, err = d.claim(ctx, topics, g.Slots, from, cur.at.Back(jobstore.ClaimSkewMargin))
		if err == nil && d.observer != nil {
			d.observer.ClaimedBehind(from, behind(claimed, cur.at.Back(jobstore.ClaimSkewMargin)))
		}
	}
	if from != ClaimFromCursor && err == nil {
		cur.sortsBeforeSeen = told
	}
	switch {
	case d.cfg.ClaimRescanInterval <= 0:
		delete(d.cursors, g.Key)
		return claimed, err
	case err != nil && from == ClaimRescan:
		cur.rescanGap = min(2*cur.gap(d.cfg.ClaimRescanInterval), MaxRescanGap)
	case err != nil:
		delete(d.cursors, g.Key)
		return claimed, err
	case from == ClaimRescan:
		cur.rescanGap = min(RescanCostFactor*time.Since(now), MaxRescanGap)
	}
	last, took := jobstore.LastClaimed(claimed)
	if !took && from == ClaimFromHead {
		delete(d.cursors, g.Key)
		return claimed, err
	}
	if took && (from == ClaimFromHead || cur.at.Before(last)) {
		cur.at = last
	}
	d.cursors[g.Key] = cur
	return claimed, err
}

// forgetCursors drops the cursors of groups that have not looked before
// them for longer than two rescan intervals: groups whose workers went
// away, or that stopped claiming. A live group rescans every interval.
func (d *Dispatcher) forgetCursors() {
	now := time.Now()
	for key, cur := range d.cursors {
		if now.Sub(cur.scannedAt) > 2*cur.gap(d.cfg.ClaimRescanInterval)+d.cfg.PollInterval {
			delete(d.cursors, key)
		}
	}
}

// Where a claim starts (ADR-0022): the from label of
// pulse_gateway_claims_total.
const (
	ClaimFromHead   = "head"     // the head of the queue
	ClaimFromCursor = "cursor"   // after the group's cursor
	ClaimRescan     = "rescan"   // before the cursor, then after it
	ClaimLookback   = "lookback" // after a time a wake named, before the cursor (ADR-0063)
)

// claim runs one claim, from the head or around the cursor at, and tells
// the observer.
func (d *Dispatcher) claim(ctx context.Context, topics, slots []string, from string, at jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	start := time.Now()
	var claimed []pulsetype.Claimed
	var err error
	switch from {
	case ClaimFromCursor, ClaimLookback:
		claimed, err = d.claimer.ClaimAfter(ctx, topics, slots, d.cfg.LeaseTTL, at)
	case ClaimRescan:
		claimed, err = d.claimer.ClaimBefore(ctx, topics, slots, d.cfg.LeaseTTL, at)
	default:
		claimed, err = d.claimer.Claim(ctx, topics, slots, d.cfg.LeaseTTL)
	}
	if d.observer != nil && (err == nil || ctx.Err() == nil) {
		d.observer.Claimed(time.Since(start), from, claimed, err)
	}
	if len(claimed) > 0 && telemetry.TracingOn() {
		traceClaimed(start, from, len(claimed), claimed)
	}
	return claimed, err
}

const tracerName = "github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"

// traceClaimed records a "claim <topic>" span in each claimed job's trace
// (a child of its stored submit context), covering the claim statement
// that started this attempt: one statement claims many jobs, outside any
// one job's trace, so without it the trace would jump from the submit to
// the dispatch.
func traceClaimed(started time.Time, from string, batch int, claimed []pulsetype.Claimed) {
	for _, j := range claimed {
		telemetry.JobSpan(tracerName, "claim "+j.Topic, telemetry.StoredSpanContext(j.TraceParent, j.TraceState), started,
			trace.SpanKindInternal,
			attribute.String("messaging.system", "pulse"),
			attribute.String("messaging.operation.type", "receive"),
			attribute.String("messaging.operation.name", "claim"),
			attribute.String("messaging.destination.name", j.Topic),
			attribute.String("messaging.message.id", j.ID.String()),
			attribute.Int("pulse.attempt", int(j.Attempt)),
			attribute.String("pulse.claim.from", from),
			attribute.Int("pulse.claim.batch", batch),
		)
	}
}
