package pulse

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// liveness bounds how long a test waits for something that must happen; it
// only keeps a broken test from hanging, it asserts nothing about speed.
const (
	liveness = 20 * time.Second
	tick     = 5 * time.Millisecond
)

// fakeGateway is an in-process DispatchService on a real loopback gRPC
// server. Tests drive each stream through the fakeStream it publishes.
type fakeGateway struct {
	pulsev1.UnimplementedDispatchServiceServer

	id      string
	addr    string
	welcome *pulsev1.Welcome
	streams chan *fakeStream
	results chan *pulsev1.JobResult

	// holdHalfClosed keeps a stream the worker half-closed open, still
	// sending what the test queues on out, until the test closes its end.
	holdHalfClosed bool

	mu          sync.Mutex
	opens       int                 // streams opened, refused ones included
	openFn      func(nth int) error // non-nil: a non-nil error refuses the nth open
	heartbeats  []*pulsev1.HeartbeatRequest
	reportCalls int
	heartbeatFn func(*pulsev1.HeartbeatRequest) (*pulsev1.HeartbeatResponse, error)
	reportFn    func(*pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error)
}

// fakeStream is one StreamJobs stream as the gateway sees it.
type fakeStream struct {
	open    *pulsev1.OpenStream
	md      metadata.MD
	out     chan *pulsev1.StreamJobsResponse
	credits chan int32
	kill    chan struct{}
	gone    chan struct{} // closed when the worker side ends the stream
	end     chan struct{} // closed by a test to end a held half-closed stream
}

// fastWelcome makes heartbeats frequent so tests do not wait on them.
func fastWelcome() *pulsev1.Welcome {
	return &pulsev1.Welcome{
		LeaseTtl:          durationpb.New(30 * time.Second),
		HeartbeatInterval: durationpb.New(10 * time.Millisecond),
	}
}

func newFakeGateway(t *testing.T, id string, welcome *pulsev1.Welcome) *fakeGateway {
	t.Helper()
	welcome.GatewayId = id
	g := &fakeGateway{
		id:      id,
		welcome: welcome,
		streams: make(chan *fakeStream, 16),
		results: make(chan *pulsev1.JobResult, 1000),
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g.addr = lis.Addr().String()
	srv := grpc.NewServer()
	pulsev1.RegisterDispatchServiceServer(srv, g)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return g
}

func (g *fakeGateway) StreamJobs(srv pulsev1.DispatchService_StreamJobsServer) error {
	req, err := srv.Recv()
	if err != nil {
		return err
	}
	if req.GetOpen() == nil {
		return status.Error(codes.InvalidArgument, "open must come first")
	}
	g.mu.Lock()
	g.opens++
	nth, fn := g.opens, g.openFn
	g.mu.Unlock()
	if fn != nil {
		if err := fn(nth); err != nil {
			return err
		}
	}
	if err := srv.Send(&pulsev1.StreamJobsResponse{Msg: &pulsev1.StreamJobsResponse_Welcome{Welcome: g.welcome}}); err != nil {
		return err
	}
	md, _ := metadata.FromIncomingContext(srv.Context())
	fs := &fakeStream{
		open:    req.GetOpen(),
		md:      md,
		out:     make(chan *pulsev1.StreamJobsResponse, 16),
		credits: make(chan int32, 1000),
		kill:    make(chan struct{}),
		gone:    make(chan struct{}),
		end:     make(chan struct{}),
	}
	g.streams <- fs
	gone := (<-chan struct{})(fs.gone)
	go func() {
		defer close(fs.gone)
		for {
			r, err := srv.Recv()
			if err != nil {
				return
			}
			if c := r.GetCredit(); c != nil {
				fs.credits <- c.GetSlots()
			}
		}
	}()
	for {
		select {
		case m := <-fs.out:
			if err := srv.Send(m); err != nil {
				return err
			}
		case <-fs.kill:
			return status.Error(codes.Unavailable, "gateway going away")
		case <-gone:
			if !g.holdHalfClosed {
				return nil
			}
			gone = nil
		case <-fs.end:
			for { // what the test queued before ending goes out first
				select {
				case m := <-fs.out:
					if err := srv.Send(m); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case <-srv.Context().Done():
			return srv.Context().Err()
		}
	}
}

func (g *fakeGateway) Heartbeat(_ context.Context, req *pulsev1.HeartbeatRequest) (*pulsev1.HeartbeatResponse, error) {
	g.mu.Lock()
	g.heartbeats = append(g.heartbeats, req)
	fn := g.heartbeatFn
	g.mu.Unlock()
	if fn != nil {
		return fn(req)
	}
	return holdAll(req), nil
}

// holdAll answers a heartbeat as a healthy gateway does: every lease held.
func holdAll(req *pulsev1.HeartbeatRequest) *pulsev1.HeartbeatResponse {
	resp := &pulsev1.HeartbeatResponse{}
	for _, j := range req.GetJobs() {
		resp.Results = append(resp.Results, &pulsev1.HeartbeatResult{
			JobId: j.GetJobId(), Attempt: j.GetAttempt(), LeaseHeld: true,
			LeaseUntil: timestamppb.New(time.Now().Add(30 * time.Second)),
		})
	}
	return resp
}

func (g *fakeGateway) ReportResult(_ context.Context, req *pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error) {
	g.mu.Lock()
	g.reportCalls++
	fn := g.reportFn
	g.mu.Unlock()
	if fn != nil {
		resp, err := fn(req)
		if err != nil {
			return nil, err
		}
		for _, r := range req.GetResults() {
			g.results <- r
		}
		return resp, nil
	}
	resp := &pulsev1.ReportResultResponse{}
	for _, r := range req.GetResults() {
		g.results <- r
		resp.Acks = append(resp.Acks, &pulsev1.ResultAck{JobId: r.GetJobId(), Attempt: r.GetAttempt(), Status: pulsev1.JobStatus_JOB_STATUS_COMPLETED})
	}
	return resp, nil
}

func (g *fakeGateway) setHeartbeatFn(fn func(*pulsev1.HeartbeatRequest) (*pulsev1.HeartbeatResponse, error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.heartbeatFn = fn
}

func (g *fakeGateway) setOpenFn(fn func(nth int) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.openFn = fn
}

func (g *fakeGateway) openCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.opens
}

func (g *fakeGateway) setReportFn(fn func(*pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reportFn = fn
}

func (g *fakeGateway) lastHeartbeat() *pulsev1.HeartbeatRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.heartbeats) == 0 {
		return nil
	}
	return g.heartbeats[len(g.heartbeats)-1]
}

func (g *fakeGateway) reports() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reportCalls
}

// nextStream waits for the worker to open a stream.
func (g *fakeGateway) nextStream(t *testing.T) *fakeStream {
	t.Helper()
	select {
	case fs := <-g.streams:
		return fs
	case <-time.After(liveness):
		t.Fatalf("gateway %s: no stream opened", g.id)
		return nil
	}
}

// nextResult waits for one reported result.
func (g *fakeGateway) nextResult(t *testing.T) *pulsev1.JobResult {
	t.Helper()
	select {
	case r := <-g.results:
		return r
	case <-time.After(liveness):
		t.Fatalf("gateway %s: no result reported", g.id)
		return nil
	}
}

// assign sends one Assignments message carrying jobs.
func (fs *fakeStream) assign(jobs ...*pulsev1.Assignment) {
	fs.out <- &pulsev1.StreamJobsResponse{Msg: &pulsev1.StreamJobsResponse_Assignments{Assignments: &pulsev1.Assignments{Jobs: jobs}}}
}

// awaitCredits reads credits until they add up to want, then checks that
// they do not exceed it.
func (fs *fakeStream) awaitCredits(t *testing.T, want int) {
	t.Helper()
	total := 0
	for total < want {
		select {
		case n := <-fs.credits:
			total += int(n)
		case <-time.After(liveness):
			t.Fatalf("credits: got %d, want %d", total, want)
		}
	}
	require.Equal(t, want, total)
}

func assignment(id, topic string) *pulsev1.Assignment {
	return &pulsev1.Assignment{
		JobId:       id,
		Attempt:     1,
		Topic:       topic,
		Args:        []byte(`{}`),
		MaxAttempts: 5,
		SubmittedAt: timestamppb.Now(),
		LeaseUntil:  timestamppb.New(time.Now().Add(30 * time.Second)),
	}
}
