package pulse

import (
	"context"
	"sync"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// jobKey names one attempt of one job: the gateway's fence.
type jobKey struct {
	id      string
	attempt int32
}

// runningJob is the lease bookkeeping for one held attempt.
type runningJob struct {
	topic      string
	cancel     context.CancelCauseFunc
	leaseUntil time.Time // as last reported by a gateway
	renewedAt  time.Time // local time of the last confirmed lease
	given      bool      // lease given up: canceled, no longer heartbeated
	quiesced   bool      // its scope is quiesced: Checkpoint holds
}

// runningJobs is the set of attempts the worker holds, from assignment until
// the handler returns, shared by the executor (which adds and removes) and
// the heartbeater (which renews and cancels).
type runningJobs struct {
	mu   sync.Mutex
	jobs map[jobKey]*runningJob
	// quiesceChanged is closed and replaced whenever a quiesced flag
	// changes (checkpoint.go).
	quiesceChanged chan struct{}
	// quiesced is the newest pause state's quiesced scopes ("*" or a
	// topic): an attempt added later starts with its flag already set.
	quiesced map[string]bool
}

func newRunningJobs() *runningJobs {
	return &runningJobs{jobs: make(map[jobKey]*runningJob), quiesceChanged: make(chan struct{})}
}

// add records a new attempt; it returns false if the attempt is already
// held, which means the gateway sent it twice.
func (r *runningJobs) add(k jobKey, topic string, cancel context.CancelCauseFunc, leaseUntil, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.jobs[k]; ok {
		return false
	}
	r.jobs[k] = &runningJob{topic: topic, cancel: cancel, leaseUntil: leaseUntil, renewedAt: now,
		quiesced: r.quiesced["*"] || r.quiesced[topic]}
	return true
}

// lease reports what the worker knows of the attempt's lease: the
// gateway's expiry, and the local time it was last confirmed.
func (r *runningJobs) lease(k jobKey) (leaseUntil, renewedAt time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[k]
	if !ok || j.given {
		return time.Time{}, time.Time{}, false
	}
	return j.leaseUntil, j.renewedAt, true
}

func (r *runningJobs) remove(k jobKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jobs, k)
}

// refs lists the attempts whose leases are still worth renewing.
func (r *runningJobs) refs() []*pulsev1.JobRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	refs := make([]*pulsev1.JobRef, 0, len(r.jobs))
	for k, j := range r.jobs {
		if !j.given {
			refs = append(refs, &pulsev1.JobRef{JobId: k.id, Attempt: k.attempt})
		}
	}
	return refs
}

// renewed records a gateway's confirmation that the lease is still held.
func (r *runningJobs) renewed(k jobKey, leaseUntil, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.jobs[k]; ok && !j.given {
		j.leaseUntil = leaseUntil
		j.renewedAt = at
	}
}

// giveUp cancels the attempt's handler with cause and stops renewing it; it
// reports whether the attempt was held and not already given up.
func (r *runningJobs) giveUp(k jobKey, cause error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[k]
	if !ok || j.given {
		return false
	}
	j.given = true
	j.cancel(cause)
	return true
}

// giveUpStale cancels, with ErrLeaseLost, every attempt whose lease was last
// confirmed more than ttl before now: the gateway will have let it expire.
func (r *runningJobs) giveUpStale(now time.Time, ttl time.Duration) []jobKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	var stale []jobKey
	for k, j := range r.jobs {
		if !j.given && now.Sub(j.renewedAt) > ttl {
			j.given = true
			j.cancel(ErrLeaseLost)
			stale = append(stale, k)
		}
	}
	return stale
}

// cancelAll cancels every held attempt with cause and returns how many
// there were.
func (r *runningJobs) cancelAll(cause error) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range r.jobs {
		j.cancel(cause)
	}
	return len(r.jobs)
}

func (r *runningJobs) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}
