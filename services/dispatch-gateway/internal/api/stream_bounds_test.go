package api_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// creditCounter is an observer that counts refused credit slots.
type creditCounter struct {
	mu     sync.Mutex
	excess int
}

func (c *creditCounter) Reported([]pulsetype.Ack) {}
func (c *creditCounter) Sent(int)                 {}
func (c *creditCounter) ExcessCredits(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.excess += n
}

func (c *creditCounter) refused() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.excess
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(proctest.Patience)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "gave up waiting: %s", what)
		time.Sleep(5 * time.Millisecond)
	}
}

func credit(t *testing.T, stream pulsev1.DispatchService_StreamJobsClient, slots int32) {
	t.Helper()
	require.NoError(t, stream.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Credit{Credit: &pulsev1.Credit{Slots: slots}}}))
}

// TestAHostileStreamGetsNoMoreThanItsConcurrency: a worker that opened with
// concurrency 2 and credits 10,000 slots (the most one credit may carry)
// again and again is sent 2 jobs for each 2 it holds, never more: every
// credit beyond the jobs it holds is refused and counted. (Without the cap
// the first credit would have it sent all 8 remaining jobs at once.)
func TestAHostileStreamGetsNoMoreThanItsConcurrency(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	counter := &creditCounter{}
	g := startGateway(t, pool, gatewayOpts{id: "gw-1", authn: fleetAuth(t), observer: counter})
	insert(t, g.store, 10)

	stream, cancel, err := openStream(t, g, alice, "greedy", []string{"t"}, 2)
	require.NoError(t, err)
	defer cancel()
	recvJobs(t, stream, 2)

	// Each round: it credits 10,000 slots while holding two jobs, gets
	// two slots back (and so two jobs), and nothing more.
	for round := 1; round <= 2; round++ {
		credit(t, stream, 10000)
		waitUntil(t, "the credit's refusal", func() bool { return counter.refused() == round*9998 })
		recvJobs(t, stream, 2)
		_, free := g.registry.Stats()
		require.Zero(t, free, "round %d: the stream holds its two jobs; no slot is free", round)
	}
	var running int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE status = 'RUNNING'`).Scan(&running))
	require.Equal(t, 6, running, "three rounds of two: never more than the concurrency per round")

	// A credit over the per-message bound is refused outright, naming it.
	credit(t, stream, 10001)
	_, err = stream.Recv()
	require.Equal(t, codes.InvalidArgument, status.Code(err), err)
	require.Contains(t, err.Error(), "credit.slots")
}

// TestStreamsPerIdentityAreCapped: an identity holds at most
// MaxStreamsPerIdentity streams on a gateway; one more is refused with
// ResourceExhausted naming the limit, other identities are not affected,
// and a closed stream frees its place.
func TestStreamsPerIdentityAreCapped(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	g := startGateway(t, pool, gatewayOpts{id: "gw-1", authn: fleetAuth(t), maxStreams: 2})

	_, cancel1, err := openStream(t, g, alice, "a1", []string{"t"}, 1)
	require.NoError(t, err)
	_, cancel2, err := openStream(t, g, alice, "a2", []string{"t"}, 1)
	require.NoError(t, err)
	defer cancel2()

	_, _, err = openStream(t, g, alice, "a3", []string{"t"}, 1)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), err)
	require.Contains(t, err.Error(), "PULSE_MAX_STREAMS_PER_IDENTITY")
	require.Contains(t, err.Error(), `"alice"`)

	_, cancelBob, err := openStream(t, g, bob, "b1", []string{"t"}, 1)
	require.NoError(t, err, "another identity has its own cap")
	defer cancelBob()

	// A refused open took no place: the cap counts open streams only.
	// Closing one frees its place once the gateway has seen it close.
	cancel1()
	waitUntil(t, "alice's closed stream to free its place", func() bool {
		_, c, err := openStream(t, g, alice, "a4", []string{"t"}, 1)
		if err != nil {
			require.Equal(t, codes.ResourceExhausted, status.Code(err), err)
			return false
		}
		t.Cleanup(c)
		return true
	})
}
