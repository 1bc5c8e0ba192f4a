// Package waiter holds control-api's waiters for finished jobs (WaitJob,
// GET /v1/jobs/{id}?wait=): every waiter of the process in one map, woken
// by the pulse_jobs_settled notifications of the statements that finish
// jobs, on the process's one LISTEN connection. A waiter costs Postgres
// nothing while it waits: no query, no connection, no row of its own.
// The process keeps one settle_listeners row while it has waiters, which
// is what makes settling statements notify at all (ADR-0041).
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

	regMu     sync.Mutex // one registration at a time
	liveUntil time.Time  // under regMu: the row is known to live until then

	kick chan struct{} // asks the loop to recheck every waiter now
	done chan struct{}
	wg   sync.WaitGroup
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
	}
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
	if e := h.waiting[id]; e != nil {
		close(e.wake)
		delete(h.waiting, id)
	}
}

// Resync asks for one read of every waiter's job (notifications may have
// been lost while the LISTEN connection was down); it does not block.
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

// recheck reads, in one statement, which waited-for jobs have finished,
// and wakes their waiters.
func (h *Hub) recheck(ctx context.Context) {
	h.mu.Lock()
	ids := make([]uuid.UUID, 0, len(h.waiting))
	for id := range h.waiting {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	finished, err := h.store.Finished(ctx, ids)
	if err != nil {
		h.log.Warn("recheck of waited-for jobs failed; waiters fall back to their timeouts", "error", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range finished {
		h.wakeLocked(id)
	}
}
