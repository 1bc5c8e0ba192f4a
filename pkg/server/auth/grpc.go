package auth

import (
	"context"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// TapHandle authenticates every gRPC call from its authorization header
// and checks the caller's role against policy, before the call's stream
// exists: install it with grpc.InTapHandle (grpcserver.Options.Admit). A
// refused call is answered Unauthenticated, PermissionDenied or
// ResourceExhausted (too many failed attempts) and its message is never
// read, let alone decompressed or decoded. An admitted call's context — the
// one its handler gets — carries the identity (IdentityFrom). A nil a is
// open mode: every call proceeds as Anonymous.
//
// grpc-go runs the handle on the connection's reader goroutine, so it
// must not block for long: a credentials check costs an HMAC, or one
// bcrypt verify the first time a user's password is seen (later ones hit
// the cache), and waits for a free bcrypt slot at most BcryptWaitMax.
func TapHandle(a *Authenticator, policy Policy) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		var header string
		if v := info.Header.Get("authorization"); len(v) > 0 {
			header = v[0]
		}
		ctx, err := a.admit(ctx, policy.method(info.FullMethodName), header, grpcSource(ctx), info.FullMethodName)
		if err != nil {
			return nil, grpcRefusal(err)
		}
		return ctx, nil
	}
}

// grpcSource is the caller's address without its port, the key failed
// attempts are counted under.
func grpcSource(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	return hostOf(p.Addr.String())
}

// grpcRefusal is a refusal as a gRPC status; a rate-limited one carries
// its retry hint as RetryInfo.
func grpcRefusal(err error) error {
	st := apierr.GRPCStatus(err)
	if d, ok := apierr.RetryAfterOf(err); ok {
		if withInfo, derr := st.WithDetails(retryInfo(d)); derr == nil {
			st = withInfo
		}
	}
	return st.Err()
}
