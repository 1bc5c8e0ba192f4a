package grpcserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

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
	grpc    *grpc.Server
	health  *health.Server
	metrics *grpcprom.ServerMetrics
	logger  *slog.Logger
}

// New builds the server. Interceptors run, outermost first: metrics (so
// they see the final code), error mapping, panic recovery, then the extras.
func New(opts Options) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{health: health.NewServer(), metrics: opts.Metrics, logger: logger}

	recoverOpt := recovery.WithRecoveryHandlerContext(s.recovered)
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	if opts.Metrics != nil {
		unary = append(unary, opts.Metrics.UnaryServerInterceptor())
		stream = append(stream, opts.Metrics.StreamServerInterceptor())
	}
	unary = append(unary, s.mapUnaryError, recovery.UnaryServerInterceptor(recoverOpt))
	stream = append(stream, s.mapStreamError, recovery.StreamServerInterceptor(recoverOpt))
	unary = append(unary, opts.ExtraUnary...)
	stream = append(stream, opts.ExtraStream...)

	serverOpts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
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
	}
	if opts.Admit != nil {
		serverOpts = append(serverOpts, grpc.InTapHandle(opts.Admit))
	}
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

// recovered turns a handler panic into codes.Internal, logging the stack
// here because the client sees only a generic message.
func (s *Server) recovered(ctx context.Context, p any) error {
	method, _ := grpc.Method(ctx)
	s.logger.ErrorContext(ctx, "panic in grpc handler",
		"method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return status.Error(codes.Internal, "internal error")
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

// mapError is the one place handler errors become gRPC statuses.
func (s *Server) mapError(ctx context.Context, method string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err // already a status, e.g. from recovery: logged there
	}
	st := apierr.GRPCStatus(err)
	if st.Code() == codes.Internal {
		s.logger.ErrorContext(ctx, "grpc call failed", "method", method, logging.Error, err)
	}
	return st.Err()
}
