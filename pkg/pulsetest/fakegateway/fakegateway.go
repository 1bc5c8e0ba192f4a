// Package fakegateway is an in-process dispatch-gateway for tests: a real
// gRPC server on a loopback port that speaks pulse's DispatchService, so a
// real [pulse.Worker] can connect to it, while the test decides what the
// gateway sends and sees what the worker sends back.
//
// It is the low-level harness: the test assigns jobs on a [Stream] and
// reads the worker's credits, heartbeats and results, and can make the
// gateway refuse a stream, fail a report, answer heartbeats its own way
// or go away. For running an application's handlers, package pulsetest
// builds on it ([pulsetest.Gateway], [pulsetest.Work]).
//
// It imports nothing of pulse but the wire types (pkg/pulsepb), so the
// SDK's own tests use it too.
//
// [pulse.Worker]: https://pkg.go.dev/github.com/pulsequeue/pulse/pkg/pulse#Worker
// [pulsetest.Gateway]: https://pkg.go.dev/github.com/pulsequeue/pulse/pkg/pulsetest#Gateway
// [pulsetest.Work]: https://pkg.go.dev/github.com/pulsequeue/pulse/pkg/pulsetest#Work
package fakegateway

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// Patience bounds how long a wait of this package (NextStream,
// NextResult, AwaitCredits) lasts before it fails the test. It only keeps
// a broken test from hanging; it asserts nothing about speed.
const Patience = 20 * time.Second

// Gateway is an in-process DispatchService on a real loopback gRPC server.
// Tests drive each stream a worker opens through the [Stream] it
// publishes. Its zero value is not usable; call [New].
type Gateway struct {
	pulsev1.UnimplementedDispatchServiceServer

	id      string
	addr    string
	welcome *pulsev1.Welcome
	streams chan *Stream
	results chan *pulsev1.JobResult

	mu             sync.Mutex
	holdHalfClosed bool
	opens          int                 // streams opened, refused ones included
	openFn         func(nth int) error // non-nil: a non-nil error refuses the nth open
	heartbeats     []*pulsev1.HeartbeatRequest
	reportCalls    int
	heartbeatFn    func(*pulsev1.HeartbeatRequest) (*pulsev1.HeartbeatResponse, error)
	reportFn       func(*pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error)
	progress       []*pulsev1.UpdateProgressRequest
}

// Stream is one StreamJobs stream as the gateway sees it.
type Stream struct {
	// Open is what the worker opened the stream with: its id, topics and
	// concurrency.
	Open *pulsev1.OpenStream
	// MD is the stream's request metadata (credentials among it).
	MD metadata.MD

	out      chan *pulsev1.StreamJobsResponse
	credits  chan int32
	kill     chan struct{}
	killOnce sync.Once
	gone     chan struct{} // closed when the worker side ends the stream
	end      chan struct{} // closed by a test to end a held half-closed stream
	endOnce  sync.Once
}

// FastWelcome is a Welcome with a 30s lease and a 10ms heartbeat interval,
// so tests do not wait on heartbeats.
func FastWelcome() *pulsev1.Welcome {
	return &pulsev1.Welcome{
		LeaseTtl:          durationpb.New(30 * time.Second),
		HeartbeatInterval: durationpb.New(10 * time.Millisecond),
	}
}

// New starts a gateway named id on a loopback port, welcoming every
// stream with welcome (nil: [FastWelcome]). It stops when the test ends;
// stop the workers using it first (t.Cleanup runs last-registered first).
// Every heartbeat is answered lease-held and every result acknowledged
// COMPLETED unless the test sets its own answers.
func New(t testing.TB, id string, welcome *pulsev1.Welcome) *Gateway {
	t.Helper()
	if welcome == nil {
		welcome = FastWelcome()
	}
	welcome.GatewayId = id
	g := &Gateway{
		id:      id,
		welcome: welcome,
		streams: make(chan *Stream, 16),
		results: make(chan *pulsev1.JobResult, 1000),
	}
	g.addr = Serve(t, func(srv *grpc.Server) { pulsev1.RegisterDispatchServiceServer(srv, g) })
	return g
}

// ID is the gateway's id, as its Welcome says.
func (g *Gateway) ID() string { return g.id }

// Addr is the gateway's host:port, a target for pulse.NewWorker.
func (g *Gateway) Addr() string { return g.addr }

// HoldHalfClosed keeps a stream the worker half-closed open, still
// sending what the test queues on it, until the test calls [Stream.End].
func (g *Gateway) HoldHalfClosed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holdHalfClosed = true
}

// StreamJobs implements DispatchService.
func (g *Gateway) StreamJobs(srv pulsev1.DispatchService_StreamJobsServer) error {
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
	fs := &Stream{
		Open:    req.GetOpen(),
		MD:      md,
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
			g.mu.Lock()
			hold := g.holdHalfClosed
			g.mu.Unlock()
			if !hold {
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

// Heartbeat implements DispatchService: every lease held ([HoldAll])
// unless [Gateway.SetHeartbeatFn] answers otherwise.
func (g *Gateway) Heartbeat(_ context.Context, req *pulsev1.HeartbeatRequest) (*pulsev1.HeartbeatResponse, error) {
	g.mu.Lock()
	g.heartbeats = append(g.heartbeats, req)
	fn := g.heartbeatFn
	g.mu.Unlock()
	if fn != nil {
		return fn(req)
	}
	return HoldAll(req), nil
}

// UpdateProgress implements DispatchService: every update is recorded
// ([Gateway.Progress]) and answered held, as a healthy gateway answers the
// lease holder of a running attempt.
func (g *Gateway) UpdateProgress(_ context.Context, req *pulsev1.UpdateProgressRequest) (*pulsev1.UpdateProgressResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.progress = append(g.progress, req)
	return &pulsev1.UpdateProgressResponse{Held: true}, nil
}

// Progress returns every UpdateProgress request received so far (a
// handler's job.SetProgress and job.SetMetadata), in order.
func (g *Gateway) Progress() []*pulsev1.UpdateProgressRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*pulsev1.UpdateProgressRequest(nil), g.progress...)
}

// HoldAll answers a heartbeat as a healthy gateway does: every lease held
// for 30s more.
func HoldAll(req *pulsev1.HeartbeatRequest) *pulsev1.HeartbeatResponse {
	resp := &pulsev1.HeartbeatResponse{}
	for _, j := range req.GetJobs() {
		resp.Results = append(resp.Results, &pulsev1.HeartbeatResult{
			JobId: j.GetJobId(), Attempt: j.GetAttempt(), LeaseHeld: true,
			LeaseUntil: timestamppb.New(time.Now().Add(30 * time.Second)),
		})
	}
	return resp
}

// ReportResult implements DispatchService: every result is published on
// [Gateway.Results] and acknowledged as accepted, unless
// [Gateway.SetReportFn] answers otherwise.
func (g *Gateway) ReportResult(_ context.Context, req *pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error) {
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
		resp.Acks = append(resp.Acks, &pulsev1.ResultAck{JobId: r.GetJobId(), Attempt: r.GetAttempt(), Status: ackStatus(r.GetOutcome())})
	}
	return resp, nil
}

// ackStatus is the status a real gateway acknowledges an outcome with
// when attempts remain.
func ackStatus(o pulsev1.Outcome) pulsev1.JobStatus {
	switch o {
	case pulsev1.Outcome_OUTCOME_FAIL:
		return pulsev1.JobStatus_JOB_STATUS_RETRYING
	case pulsev1.Outcome_OUTCOME_FAIL_PERMANENT:
		return pulsev1.JobStatus_JOB_STATUS_DEAD_LETTERED
	case pulsev1.Outcome_OUTCOME_SNOOZE:
		return pulsev1.JobStatus_JOB_STATUS_PENDING
	default:
		return pulsev1.JobStatus_JOB_STATUS_COMPLETED
	}
}

// SetHeartbeatFn answers every heartbeat from now on with fn.
func (g *Gateway) SetHeartbeatFn(fn func(*pulsev1.HeartbeatRequest) (*pulsev1.HeartbeatResponse, error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.heartbeatFn = fn
}

// SetOpenFn decides every stream open from now on: a non-nil error from
// fn(nth) (nth counts opens from 1, refused ones included) refuses it.
func (g *Gateway) SetOpenFn(fn func(nth int) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.openFn = fn
}

// SetReportFn answers every ReportResult call from now on with fn; the
// results of a call fn does not fail are still published on Results.
func (g *Gateway) SetReportFn(fn func(*pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reportFn = fn
}

// OpenCount is how many streams were opened, refused ones included.
func (g *Gateway) OpenCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.opens
}

// Reports is how many ReportResult calls the gateway received.
func (g *Gateway) Reports() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reportCalls
}

// LastHeartbeat is the latest heartbeat received, nil before any.
func (g *Gateway) LastHeartbeat() *pulsev1.HeartbeatRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.heartbeats) == 0 {
		return nil
	}
	return g.heartbeats[len(g.heartbeats)-1]
}

// Streams publishes every stream a worker opens and the gateway welcomes.
func (g *Gateway) Streams() <-chan *Stream { return g.streams }

// Results publishes every result a worker reports.
func (g *Gateway) Results() <-chan *pulsev1.JobResult { return g.results }

// NextStream waits for a worker to open a stream, failing the test after
// [Patience].
func (g *Gateway) NextStream(t testing.TB) *Stream {
	t.Helper()
	select {
	case fs := <-g.streams:
		return fs
	case <-time.After(Patience):
		t.Fatalf("fakegateway %s: no stream opened within %s", g.id, Patience)
		return nil
	}
}

// NextResult waits for one reported result, failing the test after
// [Patience].
func (g *Gateway) NextResult(t testing.TB) *pulsev1.JobResult {
	t.Helper()
	select {
	case r := <-g.results:
		return r
	case <-time.After(Patience):
		t.Fatalf("fakegateway %s: no result reported within %s", g.id, Patience)
		return nil
	}
}

// Assign sends one Assignments message carrying jobs.
func (fs *Stream) Assign(jobs ...*pulsev1.Assignment) {
	fs.Send(&pulsev1.StreamJobsResponse{Msg: &pulsev1.StreamJobsResponse_Assignments{Assignments: &pulsev1.Assignments{Jobs: jobs}}})
}

// Send queues any message for the worker (a DispatchState, say).
func (fs *Stream) Send(m *pulsev1.StreamJobsResponse) { fs.out <- m }

// Credits publishes the slots each Credit message of the worker returns.
func (fs *Stream) Credits() <-chan int32 { return fs.credits }

// AwaitCredits reads credits until they add up to want, failing the test
// if they do not within [Patience] or if they add up to more.
func (fs *Stream) AwaitCredits(t testing.TB, want int) {
	t.Helper()
	total := 0
	for total < want {
		select {
		case n := <-fs.credits:
			total += int(n)
		case <-time.After(Patience):
			t.Fatalf("fakegateway: credits add up to %d, want %d", total, want)
		}
	}
	if total != want {
		t.Fatalf("fakegateway: credits add up to %d, want %d", total, want)
	}
}

// Kill ends the stream from the gateway's side with Unavailable, as a
// gateway going away does.
func (fs *Stream) Kill() { fs.killOnce.Do(func() { close(fs.kill) }) }

// End ends a stream held half-closed ([Gateway.HoldHalfClosed]) after
// sending what was queued on it.
func (fs *Stream) End() { fs.endOnce.Do(func() { close(fs.end) }) }

// Gone is closed when the worker's side of the stream ended.
func (fs *Stream) Gone() <-chan struct{} { return fs.gone }

// Assignment is attempt 1 of job id on topic with args `{}`, five
// attempts and a 30s lease; tests change what they need.
func Assignment(id, topic string) *pulsev1.Assignment {
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

// Serve runs a gRPC server on a loopback port with what register adds,
// and returns its host:port; the server stops when the test ends. It is
// how the fakes here and in pulsetest listen, for a test's own fake
// service too.
func Serve(t testing.TB, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fakegateway: listen: %v", err)
	}
	srv := grpc.NewServer()
	register(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return lis.Addr().String()
}
