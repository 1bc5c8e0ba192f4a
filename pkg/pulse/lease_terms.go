package pulse

import (
	"sync"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// Lease terms assumed before any gateway has welcomed the worker; they match
// the gateway's defaults.
const (
	defaultLeaseTTL          = 30 * time.Second
	defaultHeartbeatInterval = 10 * time.Second
)

// leaseTerms holds the lease TTL and heartbeat interval from the latest
// Welcome. The stream loop writes them; the heartbeater and the reporter
// read them. changed wakes the heartbeater so a new interval applies at once.
type leaseTerms struct {
	mu       sync.Mutex
	ttl      time.Duration
	interval time.Duration
	changed  chan struct{}
}

func newLeaseTerms() *leaseTerms {
	return &leaseTerms{
		ttl:      defaultLeaseTTL,
		interval: defaultHeartbeatInterval,
		changed:  make(chan struct{}, 1),
	}
}

func (t *leaseTerms) leaseTTL() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ttl
}

func (t *leaseTerms) heartbeatInterval() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.interval
}

// update adopts the terms a gateway announced, ignoring unset fields.
func (t *leaseTerms) update(w *pulsev1.Welcome) {
	t.mu.Lock()
	if d := w.GetLeaseTtl().AsDuration(); w.GetLeaseTtl() != nil && d > 0 {
		t.ttl = d
	}
	if d := w.GetHeartbeatInterval().AsDuration(); w.GetHeartbeatInterval() != nil && d > 0 {
		t.interval = d
	}
	t.mu.Unlock()
	select {
	case t.changed <- struct{}{}:
	default:
	}
}
