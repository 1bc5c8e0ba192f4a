package auth

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// UnaryInterceptor authenticates every unary call from its authorization
// metadata and checks the caller's role against policy. A nil a is open
// mode: every call proceeds as Anonymous. Errors are gRPC statuses
// (Unauthenticated, PermissionDenied), so the interceptor works in any
// chain; in grpcserver it belongs in Options.ExtraUnary.
func UnaryInterceptor(a *Authenticator, policy Policy) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.admitGRPC(ctx, policy, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor is UnaryInterceptor for streams: the check runs once,
// when the stream opens, and the handler's stream context carries the
// identity.
func StreamInterceptor(a *Authenticator, policy Policy) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.admitGRPC(ss.Context(), policy, info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &identityStream{ServerStream: ss, ctx: ctx})
	}
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identityStream) Context() context.Context { return s.ctx }

func (a *Authenticator) admitGRPC(ctx context.Context, policy Policy, fullMethod string) (context.Context, error) {
	var header string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			header = v[0]
		}
	}
	ctx, err := a.admit(ctx, policy.method(fullMethod), header, fullMethod)
	if err != nil {
		return nil, apierr.GRPCStatus(err).Err()
	}
	return ctx, nil
}

// admit is the one decision both transports make: open mode admits all as
// Anonymous; Public admits without credentials; otherwise the credentials
// must be good and the role admitted. what names the call in a
// PermissionDenied message.
func (a *Authenticator) admit(ctx context.Context, roles []Role, header, what string) (context.Context, error) {
	if a == nil {
		return WithIdentity(ctx, Anonymous), nil
	}
	if unauthenticated.Allowed(roles) {
		return WithIdentity(ctx, unauthenticated), nil
	}
	id, err := a.Authenticate(header)
	if err != nil {
		return nil, err
	}
	if !id.Allowed(roles) {
		return nil, apierr.PermissionDenied("role " + string(id.Role) + " may not call " + what + "; it needs " + describe(roles))
	}
	return WithIdentity(ctx, id), nil
}
