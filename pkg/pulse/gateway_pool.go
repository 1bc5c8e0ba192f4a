package pulse

import (
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// gatewayPool holds one connection per dispatch-gateway target and which
// one the worker currently streams from. Heartbeats and results go to the
// current gateway too: any replica accepts any job's report, and the one
// the stream reaches is the one most likely to be up.
type gatewayPool struct {
	targets []string
	conns   []*grpc.ClientConn
	clients []pulsev1.DispatchServiceClient

	mu      sync.Mutex
	cur     int
	rotated bool
}

func dialGateways(targets []string, opts []grpc.DialOption) (*gatewayPool, error) {
	p := &gatewayPool{targets: targets}
	for _, t := range targets {
		conn, err := grpc.NewClient(t, opts...)
		if err != nil {
			_ = p.close()
			return nil, fmt.Errorf("pulse: dial dispatch-gateway %q: %w", t, err)
		}
		p.conns = append(p.conns, conn)
		p.clients = append(p.clients, pulsev1.NewDispatchServiceClient(conn))
	}
	return p, nil
}

// rotate makes the next target current, round-robin, starting with the
// first, and returns it; the stream loop calls it before every connection
// attempt so a failing gateway is not retried while others may be up.
func (p *gatewayPool) rotate() (string, pulsev1.DispatchServiceClient) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rotated {
		p.cur = (p.cur + 1) % len(p.clients)
	}
	p.rotated = true
	return p.targets[p.cur], p.clients[p.cur]
}

// current returns the gateway the worker is streaming from, or last tried.
// size is how many gateway targets the pool rotates through.
func (p *gatewayPool) size() int { return len(p.clients) }

func (p *gatewayPool) current() pulsev1.DispatchServiceClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clients[p.cur]
}

func (p *gatewayPool) close() error {
	var errs []error
	for _, c := range p.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
