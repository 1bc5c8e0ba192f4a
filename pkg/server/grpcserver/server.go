package grpcserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

const (
	// KeepaliveMinTime is the shortest client ping interval tolerated;
	// workers pinging faster are disconnected with ENHANCE_YOUR_CALM.
	KeepaliveMinTime = 5 * time.Second
	// KeepaliveTime is how long a connection may be idle before the server
	// pings it, which finds dead workers behind NATs and load balancers.
	KeepaliveTime = 30 * time.Second
	// KeepaliveTimeout is how long the server waits for a ping's answer
	// before closing the connection.
	KeepaliveTimeout = 10 * time.Second
	// MaxHeaderListSize bounds the headers of a call (its metadata): what
	// the tap handle reads before it admits or refuses the call.
	MaxHeaderListSize = 64 << 10
	// MaxConcurrentStreams bounds the calls and streams one connection may
	// have open at once.
	MaxConcurrentStreams = 1024
	// DefaultMaxRecvMsgSize is Options.MaxRecvMsgSize when unset: grpc-go's
	// own default, named.
	DefaultMaxRecvMsgSize = 4 << 20
	// DefaultInflightBytes is Options.InflightBytes when unset.
	DefaultInflightBytes = 512 << 20
)

// Options configures New. Every field is optional.
type Options struct {
	// Logger receives recovered panics and internal errors.
	Logger *slog.Logger
	// Metrics, from metrics.GRPCServerMetrics, records grpc_server_*
	// metrics; nil records none.
	Metrics *grpcprom.ServerMetrics
	// Admit decides from a call's method and headers alone whether it may
	// proceed, before its stream exists (grpc.InTapHandle): a refused
	// call's message is never read. The context it returns is the call's,
	// so the caller's identity rides on it. Authentication goes here
	// (auth.TapHandle). nil admits every call. It runs on the
	// connection's reader goroutine and must not block for long.
	Admit tap.ServerInHandle
	// DisableReflection leaves the reflection service unregistered.
	DisableReflection bool
	// MaxRecvMsgSize is the largest message any call may receive
	// (grpc.MaxRecvMsgSize, which also caps what a compressed message may
	// decompress to); 0 is DefaultMaxRecvMsgSize.
	MaxRecvMsgSize int
	// LargeMethods are the full method names whose messages may reach
	// MaxRecvMsgSize. Each admitted call of one holds MaxRecvMsgSize bytes
	// of the InflightBytes budget until it ends; a call that finds too
	// little left waits for it, after Admit and before its message is
	// read, for as long as its own deadline allows: backpressure, not an
	// error, so many producers with small batches queue briefly rather
	// than fail.
	LargeMethods []string
	// SmallMsgSize bounds the messages of every other method: a larger one
	// is refused ResourceExhausted once received, before the handler runs.
	// 0 is MaxRecvMsgSize (no distinction).
	SmallMsgSize int
	// InflightBytes is the budget LargeMethods calls draw from, and
	// compressed calls of every other method too (see New); 0 is
	// DefaultInflightBytes.
	InflightBytes int64
	// ExtraUnary and ExtraStream run inside the shared interceptors, so
	// their panics are recovered and their errors mapped.
	ExtraUnary  []grpc.UnaryServerInterceptor
	ExtraStream []grpc.StreamServerInterceptor
	// ServerOptions are appended to the defaults, for example TLS
	// credentials or message size limits.
	ServerOptions []grpc.ServerOption
}

// Server is a gRPC server with health and (unless disabled) reflection
// registered. Register
// the service's own implementations on GRPC() before Serve.
type Server struct {
	admit   tap.ServerInHandle
	large   map[string]bool
	maxRecv int
	small   int
	budget  *semaphore.Weighted
	// budgetWaiting counts calls waiting for the budget.
	budgetWaiting atomic.Int64
	grpc          *grpc.Server
	health        *health.Server
	metrics       *grpcprom.ServerMetrics
	logger        *slog.Logger
}

// New builds the server. Interceptors run, outermost first: metrics (so
// they see the final code), error mapping, panic recovery, then the extras.
func New(opts Options) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{health: health.NewServer(), metrics: opts.Metrics, logger: logger, admit: opts.Admit,
		maxRecv: opts.MaxRecvMsgSize, small: opts.SmallMsgSize, large: map[string]bool{}}
	if s.maxRecv <= 0 {
		s.maxRecv = DefaultMaxRecvMsgSize
	}
	if s.small <= 0 || s.small > s.maxRecv {
		s.small = s.maxRecv
	}
	for _, m := range opts.LargeMethods {
		s.large[m] = true
	}
	budget := opts.InflightBytes
	if budget <= 0 {
		budget = DefaultInflightBytes
	}
	s.budget = semaphore.NewWeighted(budget)

	recoverOpt := recovery.WithRecoveryHandlerContext(s.recovered)
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	if opts.Metrics != nil {
		unary = append(unary, opts.Metrics.UnaryServerInterceptor())
		stream = append(stream, opts.Metrics.StreamServerInterceptor())
	}
	unary = append(unary, s.mapUnaryError, recovery.UnaryServerInterceptor(recoverOpt))
	stream = append(stream, s.mapStreamError, recovery.StreamServerInterceptor(recoverOpt))
	if s.small < s.maxRecv {
		unary = append(unary, s.boundUnary)
		stream = append(stream, s.boundStream)
	}
	unary = append(unary, opts.ExtraUnary...)
	stream = append(stream, opts.ExtraStream...)

	serverOpts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.StatsHandler(budgetCalls{s}),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             KeepaliveMinTime,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    KeepaliveTime,
			Timeout: KeepaliveTimeout,
		}),
		grpc.MaxHeaderListSize(MaxHeaderListSize),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.MaxRecvMsgSize(s.maxRecv),
	}
	serverOpts = append(serverOpts, grpc.InTapHandle(s.tap))
	s.grpc = grpc.NewServer(append(serverOpts, opts.ServerOptions...)...)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if !opts.DisableReflection {
		reflection.Register(s.grpc)
	}
	return s
}

// GRPC returns the underlying server, for registering services.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Health returns the health service, for reporting a registered service's
// own status (an empty name is the whole server).
func (s *Server) Health() *health.Server { return s.health }

// Serve marks the server and every registered service SERVING and serves
// lis until Stop. It returns nil after Stop, even one that came first.
func (s *Server) Serve(lis net.Listener) error {
	if s.metrics != nil {
		s.metrics.InitializeMetrics(s.grpc)
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for name := range s.grpc.GetServiceInfo() {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	// Stop may win the race with a slow start; that is a clean stop too.
	if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("grpcserver: serve: %w", err)
	}
	return nil
}

// SetNotServing marks the server and every service NOT_SERVING on the
// health service, for good: the first step of a shutdown, taken while the
// listener still answers, so clients and load balancers move away before
// it closes.
func (s *Server) SetNotServing() {
	s.health.Shutdown()
}

// Stop marks health NOT_SERVING, then waits for in-flight calls and streams
// to finish; when ctx is done first it closes them and reports that.
func (s *Server) Stop(ctx context.Context) error {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.grpc.GracefulStop()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		return fmt.Errorf("grpcserver: graceful stop cut short: %w", ctx.Err())
	}
}

// tap admits a call before its stream exists (Admit): an unauthenticated
// call is refused from its headers and touches no budget.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if s.admit == nil {
		return ctx, nil
	}
	return s.admit(ctx, info)
}

// budgetCalls bounds what admitted calls may make the server hold at once,
// together. A call of a large method may bring MaxRecvMsgSize bytes, and
// grpc-go decompresses a message up to MaxRecvMsgSize whatever the
// method, while it keeps grpc-encoding out of the tap's metadata. Its
// stats handlers do see both, in the InHeader event, which the server
// handles on the call's own goroutine before it receives the message — so
// a call may wait there, where the tap, on the connection's reader
// goroutine, may not. A call of a large method, and a compressed call of
// any other, waits for MaxRecvMsgSize bytes of the budget, given back when
// the call ends (grpc-go ends the call's context on every way a stream
// ends). Uncompressed calls of small methods wait for nothing: their
// messages cost what their callers send, within SmallMsgSize.
type budgetCalls struct{ s *Server }

func (c budgetCalls) HandleRPC(ctx context.Context, st stats.RPCStats) {
	in, ok := st.(*stats.InHeader)
	if !ok {
		return
	}
	compressed := in.Compression != "" && in.Compression != "identity"
	if !compressed && !c.s.large[in.FullMethod] {
		return
	}
	n := int64(c.s.maxRecv)
	c.s.budgetWaiting.Add(1)
	err := c.s.budget.Acquire(ctx, n)
	c.s.budgetWaiting.Add(-1)
	if err != nil {
		return // the call ended while it waited; nothing is read for it
	}
	context.AfterFunc(ctx, func() { c.s.budget.Release(n) })
}

func (budgetCalls) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (budgetCalls) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (budgetCalls) HandleConn(context.Context, stats.ConnStats) {}

// boundUnary refuses a small method's request larger than SmallMsgSize.
func (s *Server) boundUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.bound(info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// boundStream refuses every message of a small method's stream larger
// than SmallMsgSize.
func (s *Server) boundStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.large[info.FullMethod] {
		return handler(srv, ss)
	}
	return handler(srv, &boundedStream{ServerStream: ss, s: s, method: info.FullMethod})
}

type boundedStream struct {
	grpc.ServerStream
	s      *Server
	method string
}

func (b *boundedStream) RecvMsg(m any) error {
	if err := b.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return b.s.bound(b.method, m)
}

func (s *Server) bound(method string, msg any) error {
	if s.large[method] {
		return nil
	}
	m, ok := msg.(proto.Message)
	if !ok {
		return nil
	}
	if n := proto.Size(m); n > s.small {
		return status.Errorf(codes.ResourceExhausted, "message of %d bytes is larger than the %d this method accepts", n, s.small)
	}
	return nil
}

// recovered turns a handler panic into codes.Internal, logging the stack
// here because the client sees only a generic message.
func (s *Server) recovered(ctx context.Context, p any) error {
	method, _ := grpc.Method(ctx)
	id := apierr.CorrelationID()
	s.logger.ErrorContext(ctx, "panic in grpc handler",
		"method", method, "correlation_id", id, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return status.Error(codes.Internal, "internal error (correlation id "+id+")")
}

func (s *Server) mapUnaryError(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		return nil, s.mapError(ctx, info.FullMethod, err)
	}
	return resp, nil
}

func (s *Server) mapStreamError(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := handler(srv, ss); err != nil {
		return s.mapError(ss.Context(), info.FullMethod, err)
	}
	return nil
}

// mapError is the one place handler errors become gRPC statuses. A
// server-side failure (Internal, Unavailable) is answered with a generic
// message and a correlation id, never its text (which may name the
// database, its user or host); the ERROR log line carries both.
func (s *Server) mapError(ctx context.Context, method string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err // already a status, e.g. from recovery: logged there
	}
	st := apierr.GRPCStatus(err)
	if apierr.Concealed(err) {
		id := apierr.CorrelationID()
		s.logger.ErrorContext(ctx, "grpc call failed", "method", method, "code", st.Code().String(),
			"correlation_id", id, logging.Error, err)
		return status.Error(st.Code(), apierr.PublicMessage(err, id))
	}
	return st.Err()
}
