package dispatch

import (
	"slices"
	"strings"
	"sync"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// Worker is one connected StreamJobs stream. The dispatcher reserves its
// free slots, claims jobs for them, and appends the claimed jobs to its
// outbox; the stream goroutine takes the outbox and sends it (TakeOutbox).
type Worker struct {
	ID       string
	Topics   []string // sorted
	groupKey string

	mu       sync.Mutex
	free     int
	reserved int // slots a claim in flight holds; Settle returns them
	// held is the jobs the worker holds: delivered to it (sent or about to
	// be) and not credited back, plus those it declared in flight when
	// it opened. free + reserved + held is the concurrency it declared,
	// whatever it credits: Credit clamps a credit to held.
	held   int
	outbox []pulsetype.Claimed
	closed bool
	ready  chan struct{} // signalled when the outbox gains jobs
	// finishing is set by Finish: the worker takes no new reservations,
	// and finished is closed once no claim in flight holds its slots.
	finishing bool
	finished  chan struct{}
}

// TakeOutbox returns and clears the jobs waiting to be sent.
func (w *Worker) TakeOutbox() []pulsetype.Claimed {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.outbox
	w.outbox = nil
	return out
}

// Ready is signalled whenever jobs are appended to the outbox.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

func (w *Worker) deliver(jobs []pulsetype.Claimed) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false
	}
	w.outbox = append(w.outbox, jobs...)
	// Held in the same step as they join the outbox: a worker that takes
	// them and credits its slots back at once must find them held, or
	// Credit would clamp the credit away and the slots would be lost.
	w.held += len(jobs)
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
	return true
}

// Registry tracks the connected workers of this gateway, grouped by the
// exact set of topics they subscribe to: one claim statement serves one
// group.
type Registry struct {
	mu      sync.Mutex
	workers map[*Worker]struct{}
	// onFree is called (outside the lock) when slots become free.
	onFree func(groupKey string)
}

// NewRegistry returns an empty registry. onFree is told when a worker
// returns slots so the dispatcher can wake up.
func NewRegistry(onFree func(groupKey string)) *Registry {
	return &Registry{workers: make(map[*Worker]struct{}), onFree: onFree}
}

// Add registers a stream with free slots and nothing in flight.
func (r *Registry) Add(id string, topics []string, free int) *Worker {
	return r.AddStream(id, topics, free, 0)
}

// AddStream registers a stream that declared concurrency slots, inFlight
// of them held by jobs from before it opened (0 <= inFlight <=
// concurrency, which the caller validates). Its credits can never give it
// more than concurrency slots in all (Credit).
func (r *Registry) AddStream(id string, topics []string, concurrency, inFlight int) *Worker {
	topics = slices.Clone(topics)
	slices.Sort(topics)
	topics = slices.Compact(topics)
	free := concurrency - inFlight
	w := &Worker{ID: id, Topics: topics, groupKey: strings.Join(topics, "\x00"), free: free, held: inFlight,
		ready: make(chan struct{}, 1)}
	r.mu.Lock()
	r.workers[w] = struct{}{}
	r.mu.Unlock()
	if free > 0 && r.onFree != nil {
		r.onFree(w.groupKey)
	}
	return w
}

// Remove unregisters a stream. Jobs still in its outbox were claimed but
// never sent: their lease covers them (the reaper recovers them), exactly
// as for every claimed-but-unsent job (ADR-0004). Remove returns them
// so the caller can count and log them.
func (r *Registry) Remove(w *Worker) []pulsetype.Claimed {
	r.mu.Lock()
	delete(r.workers, w)
	r.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	left := w.outbox
	w.outbox = nil
	return left
}

// Finish stops reserving slots for w (the worker half-closed its stream:
// it takes no more work) and returns a channel closed once no claim in
// flight holds a slot of w. Every job claimed for w is in its outbox by
// then, so the stream can send them and end without leaving a lease to
// lapse.
func (r *Registry) Finish(w *Worker) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.finishing {
		w.finishing = true
		w.finished = make(chan struct{})
		if w.reserved == 0 {
			close(w.finished)
		}
	}
	return w.finished
}

// Credit returns n slots to w, at most as many as it holds jobs (a
// credit beyond those would let it be sent more jobs than the concurrency
// it declared), and returns how many slots it refused (excess).
func (r *Registry) Credit(w *Worker, n int) (excess int) {
	if n <= 0 {
		return 0
	}
	w.mu.Lock()
	excess = max(n-w.held, 0)
	n -= excess
	w.held -= n
	w.free += n
	w.mu.Unlock()
	if n > 0 && r.onFree != nil {
		r.onFree(w.groupKey)
	}
	return excess
}

// Group is one claim's worth of reserved slots: the topics to claim from
// and, per slot, the worker that receives the job.
type Group struct {
	Key     string
	Topics  []string
	Slots   []string
	workers []*Worker // parallel to Slots
}

// Reserve takes up to limit free slots from the workers of the wanted
// groups (all groups when wanted is nil), interleaving workers so a batch
// spreads across them. Reserved slots must be settled with Settle.
func (r *Registry) Reserve(wanted func(groupKey string) bool, limit int) []Group {
	groups, _ := r.ReserveFrom(wanted, limit, "")
	return groups
}

// ReserveFrom is Reserve taking the groups in key order from the first
// key at or after from, wrapping around. When limit runs out, next is
// the key of the first group it left out (empty otherwise): a caller that
// passes it to its next reservation serves the groups after it before
// the ones before it, so groups early in key order cannot take every
// batch while the others wait.
func (r *Registry) ReserveFrom(wanted func(groupKey string) bool, limit int, from string) (groups []Group, next string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := map[string][]*Worker{}
	var order []string
	for w := range r.workers {
		if wanted != nil && !wanted(w.groupKey) {
			continue
		}
		if _, ok := byKey[w.groupKey]; !ok {
			order = append(order, w.groupKey)
		}
		byKey[w.groupKey] = append(byKey[w.groupKey], w)
	}
	slices.Sort(order)
	if i, _ := slices.BinarySearch(order, from); i < len(order) {
		order = append(order[i:], order[:i]...)
	}
	total := 0
	for _, key := range order {
		if total >= limit {
			next = key
			break
		}
		ws := byKey[key]
		g := Group{Key: key, Topics: ws[0].Topics}
		// Round-robin one slot per worker per pass.
		for progress := true; progress && total < limit; {
			progress = false
			for _, w := range ws {
				if total >= limit {
					break
				}
				w.mu.Lock()
				if w.free > 0 && !w.closed && !w.finishing {
					w.free--
					w.reserved++
					g.Slots = append(g.Slots, w.ID)
					g.workers = append(g.workers, w)
					total++
					progress = true
				}
				w.mu.Unlock()
			}
		}
		if len(g.Slots) > 0 {
			groups = append(groups, g)
		}
	}
	return groups, next
}

// Settle hands claimed jobs to the workers whose slots they filled and
// gives unfilled slots back. The claim leases each job to the worker id of
// its slot; jobs are handed out per worker up to the slots reserved for it,
// so two streams sharing a worker id (a reconnect racing its old stream)
// never receive more than they reserved. It returns the jobs whose stream
// vanished in between (claimed but undeliverable).
func (r *Registry) Settle(g Group, claimed []pulsetype.Claimed) (undeliverable []pulsetype.Claimed) {
	byID := map[string][]pulsetype.Claimed{}
	for _, c := range claimed {
		byID[c.WorkerID] = append(byID[c.WorkerID], c)
	}
	reserved := map[*Worker]int{}
	var order []*Worker
	for _, w := range g.workers {
		if reserved[w] == 0 {
			order = append(order, w)
		}
		reserved[w]++
	}
	for _, w := range order {
		jobs := byID[w.ID]
		n := min(reserved[w], len(jobs))
		mine := jobs[:n]
		byID[w.ID] = jobs[n:]
		if n > 0 && !w.deliver(mine) {
			undeliverable = append(undeliverable, mine...)
		}
		w.mu.Lock()
		w.free += reserved[w] - n
		w.reserved -= reserved[w]
		if w.finishing && w.reserved == 0 {
			select {
			case <-w.finished:
			default:
				close(w.finished)
			}
		}
		w.mu.Unlock()
	}
	return undeliverable
}

// GroupKeys returns the keys of the groups that have workers.
func (r *Registry) GroupKeys() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make(map[string]bool, len(r.workers))
	for w := range r.workers {
		keys[w.groupKey] = true
	}
	return keys
}

// Stats reports connected workers and their free slots.
func (r *Registry) Stats() (workers, free int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.workers {
		workers++
		w.mu.Lock()
		free += w.free
		w.mu.Unlock()
	}
	return workers, free
}
