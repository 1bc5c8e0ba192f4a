package pulsetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulse"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

// Gateway is an in-process dispatch-gateway for an application's own
// worker: the test points the worker at [Gateway.Addr] (built by the
// application's own wiring, with its own handlers and middleware), and
// [Gateway.Dispatch] sends it a job and waits for what it reports.
//
// The embedded fakegateway.Gateway gives the lower-level view: every
// stream, credit and heartbeat, and ways to refuse or fail them. Its
// results are read by Dispatch; do not read Results yourself.
type Gateway struct {
	*fakegateway.Gateway

	mu      sync.Mutex
	stream  *fakegateway.Stream
	waiters map[string]chan *pulsev1.JobResult
	seq     int
}

// NewGateway starts a gateway on a loopback port; it stops when the test
// ends. Stop the worker using it before then (register the worker's
// cleanup after NewGateway, so it runs first).
func NewGateway(t testing.TB) *Gateway {
	t.Helper()
	g := &Gateway{Gateway: fakegateway.New(t, "pulsetest", nil), waiters: make(map[string]chan *pulsev1.JobResult)}
	done := make(chan struct{})
	routed := make(chan struct{})
	go func() {
		defer close(routed)
		for {
			select {
			case r := <-g.Results():
				g.mu.Lock()
				ch := g.waiters[r.GetJobId()]
				delete(g.waiters, r.GetJobId())
				g.mu.Unlock()
				if ch != nil {
					ch <- r
				}
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		<-routed
	})
	return g
}

// Dispatch sends one job of topic with args to the connected worker, as
// the gateway would after it was enqueued with opts, and returns what the
// worker reported. It waits for the worker to connect first. The worker
// must have registered topic; a job of a topic it did not register fails
// with "no handler registered". Dispatch may be called from several
// goroutines; each waits for its own job's result.
func (g *Gateway) Dispatch(ctx context.Context, t testing.TB, topic string, args any, opts ...pulse.EnqueueOption) *Result {
	t.Helper()
	req := pulse.JobRequest{Topic: topic, Args: args, Options: opts}
	spec, err := req.Spec()
	if err != nil {
		t.Fatalf("pulsetest: the job would not be enqueued: %v", err)
	}
	stream, err := g.connected(ctx)
	if err != nil {
		t.Fatalf("pulsetest: %v", err)
	}
	reported := make(chan *pulsev1.JobResult, 1)
	g.mu.Lock()
	g.seq++
	id := fmt.Sprintf("pulsetest-dispatch-%d", g.seq)
	g.waiters[id] = reported
	g.mu.Unlock()
	stream.Assign(assignmentOf(id, 1, spec))

	select {
	case r := <-reported:
		return resultFromProto(r)
	case <-ctx.Done():
		t.Fatalf("pulsetest: %v before job %s of topic %s was reported", context.Cause(ctx), id, topic)
	case <-time.After(fakegateway.Patience):
		t.Fatalf("pulsetest: job %s of topic %s: no result within %s", id, topic, fakegateway.Patience)
	}
	return nil
}

// connected is the worker's stream, waiting for it to open.
func (g *Gateway) connected(ctx context.Context) (*fakegateway.Stream, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stream != nil {
		select {
		case <-g.stream.Gone():
			g.stream = nil // the worker reconnects
		default:
			return g.stream, nil
		}
	}
	select {
	case s := <-g.Streams():
		g.stream = s
		return s, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w before a worker connected", context.Cause(ctx))
	case <-time.After(fakegateway.Patience):
		return nil, fmt.Errorf("no worker connected within %s", fakegateway.Patience)
	}
}
