// Package waiter holds control-api's waiters for finished jobs (WaitJob,
// GET /v1/jobs/{id}?wait=): every waiter of the process in one map, woken
// by the pulse_jobs_settled notifications of the statements that finish
// jobs, on the process's one LISTEN connection. A waiter costs Postgres
// nothing while it waits: no query, no connection, no row of its own.
// The process keeps one settle_listeners row while it has waiters, which
// is what makes settling statements notify at all (ADR-0041).
//
// The hub also remembers, for RenewGap after a job's last waiter left,
// that the job was read unfinished while the process was listening and
// that no settle has named it since (Known, MarkUnfinished): the renewal
// of a long-poll on the same process then needs no read at all, so a
// waiter costs the database nothing for as long as it waits, not only
// between renewals (ADR-0048).
package waiter

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Defaults for Options.
const (
	// DefaultListenerTTL is how long the process's settle_listeners row
	// lives unrefreshed; the hub refreshes it every third of that while
	// it has waiters, and removes it after DefaultLinger without any.
	DefaultListenerTTL = 30 * time.Second
	// DefaultLinger keeps the row after the last waiter left, so a
	// process that waits now and then does not register for each wait.
	DefaultLinger = 2 * time.Minute
	// DefaultRecheckAfter is when, after the row was (re)created, the hub
	// reads once whether any of its waiters' jobs finished: a settle whose
	// statement began before the row existed did not notify.
	DefaultRecheckAfter = time.Second
	// DefaultRenewGap is how long the hub remembers that a job was
	// unfinished after its last waiter left: long enough for a client to
	// renew its long-poll, short enough that the memory stays the size of
	// the waiters.
	DefaultRenewGap = 10 * time.Second
	// DefaultKnownFor is how long one read that found a job unfinished
	// serves renewals: every statement that finishes a job notifies, and
	// this bounds what a path that did not would cost a waiter.
	DefaultKnownFor = 5 * time.Minute
)

// Store is what the hub needs of jobstore.Store.
type Store interface {
	RegisterSettleListener(ctx context.Context, process string, ttl time.Duration) error
	UnregisterSettleListener(ctx context.Context, process string) error
	Finished(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error)
}

// Options configure a Hub; zero values take the defaults.
type Options struct {
	// Process names this process's settle_listeners row (unique per
	// process: a uuid is fine).
	Process      string
	ListenerTTL  time.Duration
	Linger       time.Duration
	RecheckAfter time.Duration
	RenewGap     time.Duration
	KnownFor     time.Duration
	Logger       *slog.Logger
}

// Hub is every waiter of the process.
type Hub struct {
	store Store
	opts  Options
	log   *slog.Logger

	mu       sync.Mutex
	waiting  map[uuid.UUID]*entry
	waiters  int
	lastLeft time.Time // when the count last reached zero
	stopped  bool
	// known holds the jobs read unfinished while the process listened
	// without a gap, that no settle has named since; see Known. After
	// anything that may have lost a notification (a resync, a fresh
	// registration of the row) the recheck reads them all again and moves
	// epoch on; a failed recheck and Stop empty it.
	known map[uuid.UUID]knownJob
	epoch uint64

	regMu     sync.Mutex // one registration at a time
	liveUntil time.Time  // under regMu: the row is known to live until then

	kick chan struct{} // asks the loop to recheck every waiter now
	done chan struct{}
	wg   sync.WaitGroup
}

// knownJob is when a job was read unfinished, and until when the hub
// remembers it without a waiter (zero while it has waiters).
type knownJob struct {
	read, until time.Time
}

// valid tells whether k still vouches for its job at now.
func (k knownJob) valid(now time.Time, knownFor time.Duration) bool {
	return now.Sub(k.read) < knownFor && (k.until.IsZero() || now.Before(k.until))
}

// entry is one job's waiters: closing wake wakes them all.
type entry struct {
	wake chan struct{}
	n    int
}

// New returns a hub on store; Start it, and route the pulse_jobs_settled
// channel's notifications to Notify and its resyncs to Resync.
func New(store Store, opts Options) *Hub {
	if opts.ListenerTTL <= 0 {
		opts.ListenerTTL = DefaultListenerTTL
	}
	if opts.Linger <= 0 {
		opts.Linger = DefaultLinger
	}
	if opts.RecheckAfter <= 0 {
		opts.RecheckAfter = DefaultRecheckAfter
	}
	if opts.RenewGap <= 0 {
		opts.RenewGap = DefaultRenewGap
	}
	if opts.KnownFor <= 0 {
		opts.KnownFor = DefaultKnownFor
	}
	if opts.Process == "" {
		opts.Process = "control-api-" + uuid.NewString()
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Hub{
		store: store, opts: opts, log: log.With("component", "waiter"),
		waiting: map[uuid.UUID]*entry{},
		known:   map[uuid.UUID]knownJob{},
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
}

// ErrStopped is Watch's answer once the hub has stopped.
var ErrStopped = errors.New("waiter: the service is shutting down")

// Watch registers a waiter for job id and returns a channel closed when a
// settle names the job (or the hub stops or rechecks it as finished), and
// the function that removes the waiter, which the caller must call. It
// makes sure the process's settle_listeners row is live first, so a
// settle committed after Watch returns notifies: read the job's state
// after Watch, never before.
func (h *Hub) Watch(ctx context.Context, id uuid.UUID) (<-chan struct{}, func(), error) {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return nil, nil, ErrStopped
	}
	e := h.waiting[id]
	if e == nil {
		e = &entry{wake: make(chan struct{})}
		h.waiting[id] = e
	}
	e.n++
	h.waiters++
	if k, ok := h.known[id]; ok {
		if k.valid(time.Now(), h.opts.KnownFor) {
			h.known[id] = knownJob{read: k.read} // waited again: kept while it is
		} else {
			delete(h.known, id)
		}
	}
	h.mu.Unlock()
	release := func() { h.release(id, e) }
	if err := h.ensureListening(ctx); err != nil {
		release()
		return nil, nil, err
	}
	return e.wake, release, nil
}

func (h *Hub) release(id uuid.UUID, e *entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.n--
	h.waiters--
	if h.waiters == 0 {
		h.lastLeft = time.Now()
	}
	if e.n == 0 && h.waiting[id] == e {
		delete(h.waiting, id)
		if k, ok := h.known[id]; ok {
			h.known[id] = knownJob{read: k.read, until: time.Now().Add(h.opts.RenewGap)}
		}
	}
}

// Known tells whether job id is known unfinished: a wait on this process
// read it unfinished after registering its waiter, no settle has named the
// job since (the settle's notification, even one still on its way, wakes
// the waiter registered before this call), and any gap in listening since
// was followed by a recheck that read it again (until that recheck ends
// the answer may be stale, and the recheck wakes the waiter), within
// KnownFor of that read. Call it after Watch: a waiter that finds
// the job known waits without reading it. token is for MarkUnfinished.
func (h *Hub) Known(id uuid.UUID) (unfinished bool, token uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k, ok := h.known[id]
	return ok && k.valid(time.Now(), h.opts.KnownFor), h.epoch
}

// MarkUnfinished records that job id was read unfinished by a waiter
// registered with wake, after Known returned token. It records nothing
// when the waiter was already woken (a settle may have named the job
// after the read) or when the hub may have lost a notification since
// token (a recheck collected its ids since).
func (h *Hub) MarkUnfinished(id uuid.UUID, wake <-chan struct{}, token uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.waiting[id]; e == nil || e.wake != wake || token != h.epoch || h.stopped {
		return
	}
	h.known[id] = knownJob{read: time.Now()}
}

// forgetLocked empties what the hub knows of unfinished jobs: from now
// on a notification may have been missed. Call with mu held.
func (h *Hub) forgetLocked() {
	h.epoch++
	clear(h.known)
}

// Waiters is how many waiters the hub holds.
func (h *Hub) Waiters() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiters
}

// ensureListening registers the process's row unless it is known to live
// for at least two thirds of its TTL more; after a registration that may
// have created it, it asks for one recheck of every waiter.
func (h *Hub) ensureListening(ctx context.Context) error {
	h.regMu.Lock()
	defer h.regMu.Unlock()
	now := time.Now()
	if now.Add(h.opts.ListenerTTL / 3).Before(h.liveUntil) {
		return nil
	}
	fresh := now.After(h.liveUntil)
	if err := h.store.RegisterSettleListener(ctx, h.opts.Process, h.opts.ListenerTTL); err != nil {
		return err
	}
	h.liveUntil = now.Add(h.opts.ListenerTTL)
	if fresh {
		h.scheduleRecheck()
	}
	return nil
}

// scheduleRecheck asks the loop for one recheck RecheckAfter from now.
func (h *Hub) scheduleRecheck() {
	time.AfterFunc(h.opts.RecheckAfter, h.Resync)
}

// Notify is the pulse_jobs_settled handler: it wakes the waiters of every
// id in payload. It runs on the listener's goroutine and does not block.
func (h *Hub) Notify(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range strings.SplitSeq(payload, ",") {
		id, err := uuid.Parse(s)
		if err != nil {
			continue
		}
		h.wakeLocked(id)
	}
}

func (h *Hub) wakeLocked(id uuid.UUID) {
	delete(h.known, id)
	if e := h.waiting[id]; e != nil {
		close(e.wake)
		delete(h.waiting, id)
	}
}

// Resync asks for one read of every waiter's job, and of every job known
// unfinished (notifications may have been lost while the LISTEN
// connection was down); it does not block.
func (h *Hub) Resync() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Start runs the hub's loop: the row's refresh and removal, and rechecks.
func (h *Hub) Start(context.Context) error {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.run()
	}()
	return nil
}

// Stop wakes every waiter (each answers with its job as it is), stops the
// loop, and removes the process's row when the database still answers.
func (h *Hub) Stop(ctx context.Context) error {
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		for id := range h.waiting {
			h.wakeLocked(id)
		}
		h.forgetLocked()
		close(h.done)
	}
	h.mu.Unlock()
	h.wg.Wait()
	// The row lapses by itself at its until; deleting it only spares the
	// settles of that short wait their NOTIFY. A database already gone at
	// shutdown is not a failure of the shutdown.
	if err := h.store.UnregisterSettleListener(ctx, h.opts.Process); err != nil {
		h.log.Warn("could not remove the settle listener row; it lapses by itself", "error", err)
	}
	return nil
}

func (h *Hub) run() {
	tick := time.NewTicker(h.opts.ListenerTTL / 3)
	defer tick.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-h.done
		cancel()
	}()
	for {
		select {
		case <-h.done:
			return
		case <-h.kick:
			h.recheck(ctx)
		case <-tick.C:
			h.maintain(ctx)
		}
	}
}

// maintain refreshes the row while there are waiters, and removes it once
// there have been none for Linger.
func (h *Hub) maintain(ctx context.Context) {
	h.mu.Lock()
	n, lastLeft := h.waiters, h.lastLeft
	now := time.Now()
	for id, k := range h.known {
		if !k.until.IsZero() && !k.valid(now, h.opts.KnownFor) {
			delete(h.known, id)
		}
	}
	h.mu.Unlock()
	if n > 0 {
		if err := h.ensureListening(ctx); err != nil {
			h.log.Warn("refresh settle listener failed; waiters fall back to their timeouts", "error", err)
		}
		return
	}
	h.regMu.Lock()
	defer h.regMu.Unlock()
	if h.liveUntil.IsZero() || time.Since(lastLeft) < h.opts.Linger {
		return
	}
	if err := h.store.UnregisterSettleListener(ctx, h.opts.Process); err != nil {
		h.log.Warn("remove settle listener failed; it lapses on its own", "error", err)
		return
	}
	h.liveUntil = time.Time{}
}

// recheck reads, in one statement, which waited-for or known-unfinished
// jobs have finished, wakes their waiters and forgets them; the others it
// knows unfinished from its own read. A waiter's read that began before
// the recheck collected its ids may predate a settle that went unheard:
// the epoch moves on with the collection, so such a read marks nothing
// (MarkUnfinished), and the recheck's read vouches instead.
func (h *Hub) recheck(ctx context.Context) {
	h.mu.Lock()
	h.epoch++
	epoch := h.epoch
	collected := make(map[uuid.UUID]*entry, len(h.waiting)+len(h.known))
	for id, e := range h.waiting {
		collected[id] = e
	}
	for id := range h.known {
		if _, ok := collected[id]; !ok {
			collected[id] = nil
		}
	}
	h.mu.Unlock()
	if len(collected) == 0 {
		return
	}
	ids := make([]uuid.UUID, 0, len(collected))
	for id := range collected {
		ids = append(ids, id)
	}
	finished, err := h.store.Finished(ctx, ids)
	if err != nil {
		h.log.Warn("recheck of waited-for jobs failed; waiters fall back to their timeouts", "error", err)
		h.mu.Lock()
		h.forgetLocked()
		h.mu.Unlock()
		return
	}
	read := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range finished {
		h.wakeLocked(id)
		delete(collected, id)
	}
	if h.epoch != epoch {
		return // a later recheck collected since: it vouches
	}
	// What is left was read unfinished after it was collected. A settle
	// heard since woke its waiter (a new entry, or none) or forgot it.
	for id, e := range collected {
		k, isKnown := h.known[id]
		switch {
		case e != nil && h.waiting[id] == e:
			h.known[id] = knownJob{read: read}
		case e == nil && isKnown:
			h.known[id] = knownJob{read: read, until: k.until}
		}
	}
}
