package auth_test

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
)

const (
	submitMethod = "/pulse.v1.ControlService/SubmitJob"
	cancelMethod = "/pulse.v1.ControlService/CancelJob"
	streamMethod = "/pulse.v1.DispatchService/StreamJobs"
)

var grpcPolicy = auth.Policy{
	submitMethod: auth.Require(auth.RoleProducer),
	cancelMethod: auth.Require(auth.RoleOperator),
	streamMethod: auth.Require(auth.RoleWorker),
}

func users(t *testing.T) *auth.Authenticator {
	t.Helper()
	a, err := auth.New("prod:producer:pp,wk:worker:ww,op:operator:oo", "")
	require.NoError(t, err)
	return a
}

// callTap runs the tap handle the way a server would, before the call's
// stream exists, and returns the identity the handler would see, or the
// status code and message.
func callTap(a *auth.Authenticator, policy auth.Policy, method, header string) (auth.Identity, codes.Code, string) {
	md := metadata.MD{}
	if header != "" {
		md = metadata.Pairs("authorization", header)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}})
	ctx, err := auth.TapHandle(a, policy)(ctx, &tap.Info{FullMethodName: method, Header: md})
	if err != nil {
		return auth.Identity{}, status.Code(err), status.Convert(err).Message()
	}
	return auth.IdentityFrom(ctx), codes.OK, ""
}

func callUnary(a *auth.Authenticator, method, header string) (auth.Identity, codes.Code, string) {
	return callTap(a, grpcPolicy, method, header)
}

func callStream(a *auth.Authenticator, method, header string) (auth.Identity, codes.Code) {
	id, code, _ := callTap(a, grpcPolicy, method, header)
	return id, code
}

func TestTapHandleUnary(t *testing.T) {
	t.Parallel()

	t.Run("ChecksCredentialsThenRole", func(t *testing.T) {
		t.Parallel()
		a := users(t)
		cases := []struct {
			name, method, header string
			want                 codes.Code
		}{
			{"NoCredentials", submitMethod, "", codes.Unauthenticated},
			{"WrongPassword", submitMethod, authtest.Basic("prod", "nope"), codes.Unauthenticated},
			{"ProducerSubmits", submitMethod, authtest.Basic("prod", "pp"), codes.OK},
			{"OperatorSubmits", submitMethod, authtest.Basic("op", "oo"), codes.OK},
			{"WorkerMayNotSubmit", submitMethod, authtest.Basic("wk", "ww"), codes.PermissionDenied},
			{"ProducerMayNotCancel", cancelMethod, authtest.Basic("prod", "pp"), codes.PermissionDenied},
			{"OperatorCancels", cancelMethod, authtest.Basic("op", "oo"), codes.OK},
			{"UnknownMethodDeniedToProducer", "/pulse.v1.ControlService/PauseDispatch", authtest.Basic("prod", "pp"), codes.PermissionDenied},
			{"UnknownMethodDeniedToWorker", "/pulse.v1.ControlService/PauseDispatch", authtest.Basic("wk", "ww"), codes.PermissionDenied},
			{"UnknownMethodAllowedToOperator", "/pulse.v1.ControlService/PauseDispatch", authtest.Basic("op", "oo"), codes.OK},
			{"UnknownMethodNeedsCredentials", "/pulse.v1.ControlService/PauseDispatch", "", codes.Unauthenticated},
			{"HealthNeedsCredentials", "/grpc.health.v1.Health/Check", "", codes.Unauthenticated},
			{"HealthRefusesBadCredentials", "/grpc.health.v1.Health/Watch", authtest.Basic("x", "y"), codes.Unauthenticated},
			{"HealthAdmitsAProducer", "/grpc.health.v1.Health/Check", authtest.Basic("prod", "pp"), codes.OK},
			{"HealthAdmitsAWorker", "/grpc.health.v1.Health/Watch", authtest.Basic("wk", "ww"), codes.OK},
			{"ReflectionNeedsCredentials", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "", codes.Unauthenticated},
			{"ReflectionRefusesAProducer", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", authtest.Basic("prod", "pp"), codes.PermissionDenied},
			{"ReflectionV1AlphaRefusesAWorker", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", authtest.Basic("wk", "ww"), codes.PermissionDenied},
			{"ReflectionAdmitsAnOperator", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", authtest.Basic("op", "oo"), codes.OK},
		}
		for _, tc := range cases {
			_, code, _ := callUnary(a, tc.method, tc.header)
			require.Equal(t, tc.want, code, tc.name)
		}
	})

	t.Run("HandlerSeesTheAuthenticatedIdentity", func(t *testing.T) {
		t.Parallel()
		id, code, _ := callUnary(users(t), submitMethod, authtest.Basic("prod", "pp"))
		require.Equal(t, codes.OK, code)
		require.Equal(t, auth.Identity{Name: "prod", Role: auth.RoleProducer}, id)
	})

	t.Run("PermissionDeniedNamesTheRoleNeeded", func(t *testing.T) {
		t.Parallel()
		_, code, msg := callUnary(users(t), cancelMethod, authtest.Basic("prod", "pp"))
		require.Equal(t, codes.PermissionDenied, code)
		require.Equal(t, "role producer may not call "+cancelMethod+"; it needs operator", msg)

		_, _, msg = callUnary(users(t), submitMethod, authtest.Basic("wk", "ww"))
		require.Contains(t, msg, "it needs producer or operator")
	})

	t.Run("OpenModeAdmitsEveryoneAsAnonymousOperator", func(t *testing.T) {
		t.Parallel()
		for _, method := range []string{submitMethod, cancelMethod, "/x.Y/Unlisted"} {
			id, code, _ := callUnary(nil, method, "")
			require.Equal(t, codes.OK, code, method)
			require.Equal(t, auth.Anonymous, id)
			require.Equal(t, auth.RoleOperator, id.Role)
		}
		id, code, _ := callUnary(nil, submitMethod, authtest.Basic("whoever", "x"))
		require.Equal(t, codes.OK, code, "open mode ignores credentials")
		require.Equal(t, auth.Anonymous, id)
	})
}

func TestTapHandleStream(t *testing.T) {
	t.Parallel()

	t.Run("ChecksCredentialsThenRoleWhenTheStreamOpens", func(t *testing.T) {
		t.Parallel()
		a := users(t)
		_, code := callStream(a, streamMethod, "")
		require.Equal(t, codes.Unauthenticated, code)
		_, code = callStream(a, streamMethod, authtest.Basic("prod", "pp"))
		require.Equal(t, codes.PermissionDenied, code)
		id, code := callStream(a, streamMethod, authtest.Basic("wk", "ww"))
		require.Equal(t, codes.OK, code)
		require.Equal(t, auth.Identity{Name: "wk", Role: auth.RoleWorker}, id, "the handler's stream context carries the identity")
		_, code = callStream(a, "/pulse.v1.DispatchService/Unlisted", authtest.Basic("wk", "ww"))
		require.Equal(t, codes.PermissionDenied, code, "fails closed")
		_, code = callStream(a, "/grpc.health.v1.Health/Watch", "")
		require.Equal(t, codes.Unauthenticated, code)
	})

	t.Run("OpenModeAdmitsEveryone", func(t *testing.T) {
		t.Parallel()
		id, code := callStream(nil, streamMethod, "")
		require.Equal(t, codes.OK, code)
		require.Equal(t, auth.Anonymous, id)
	})
}

func TestIdentity(t *testing.T) {
	t.Parallel()

	t.Run("IdentityFromRoundTripsAndDefaultsToAnonymous", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, auth.Anonymous, auth.IdentityFrom(t.Context()))
		id := auth.Identity{Name: "op", Role: auth.RoleOperator}
		require.Equal(t, id, auth.IdentityFrom(auth.WithIdentity(t.Context(), id)))
	})

	t.Run("RequireAlwaysAdmitsOperators", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []auth.Role{auth.RoleProducer, auth.RoleOperator}, auth.Require(auth.RoleProducer))
		require.Equal(t, []auth.Role{auth.RoleOperator}, auth.Require(auth.RoleOperator))
		require.Equal(t, []auth.Role{auth.RoleOperator}, auth.Require())
		require.Equal(t, []auth.Role{auth.Public}, auth.Require(auth.Public))
	})

	t.Run("AllowedFollowsTheRoles", func(t *testing.T) {
		t.Parallel()
		producer := auth.Identity{Name: "p", Role: auth.RoleProducer}
		worker := auth.Identity{Name: "w", Role: auth.RoleWorker}
		operator := auth.Identity{Name: "o", Role: auth.RoleOperator}
		roleless := auth.Identity{Name: "x"}
		read := auth.Require(auth.RoleProducer)
		require.True(t, producer.Allowed(read))
		require.False(t, worker.Allowed(read))
		require.True(t, operator.Allowed(read))
		require.True(t, operator.Allowed(nil), "operators may do everything")
		require.False(t, producer.Allowed(nil), "nothing listed admits only operators")
		require.False(t, roleless.Allowed(read))
		require.True(t, roleless.Allowed([]auth.Role{auth.Public}))
	})

	t.Run("OnlyAdmitsItsRolesAndNoOperator", func(t *testing.T) {
		t.Parallel()
		worker := auth.Identity{Name: "w", Role: auth.RoleWorker}
		operator := auth.Identity{Name: "o", Role: auth.RoleOperator}
		producer := auth.Identity{Name: "p", Role: auth.RoleProducer}
		only := auth.Only(auth.RoleWorker)
		require.True(t, worker.Allowed(only))
		require.False(t, operator.Allowed(only), "an operator cannot act in a worker's name")
		require.False(t, producer.Allowed(only))
		require.False(t, auth.Identity{Name: "x"}.Allowed(only))

		const reportMethod = "/pulse.v1.DispatchService/ReportResult"
		policy := auth.Policy{reportMethod: only}
		a := users(t)
		for header, want := range map[string]codes.Code{
			authtest.Basic("wk", "ww"):   codes.OK,
			authtest.Basic("op", "oo"):   codes.PermissionDenied,
			authtest.Basic("prod", "pp"): codes.PermissionDenied,
		} {
			_, code, msg := callTap(a, policy, reportMethod, header)
			require.Equal(t, want, code, header)
			if want != codes.OK {
				require.Contains(t, msg, "it needs worker")
				require.NotContains(t, msg, "or operator")
			}
		}
		// Open mode stays open: every caller is the anonymous operator.
		_, code, _ := callTap(nil, policy, reportMethod, "")
		require.Equal(t, codes.OK, code)
	})

	t.Run("ParseRoleKnowsTheThreeRoles", func(t *testing.T) {
		t.Parallel()
		for _, r := range []auth.Role{auth.RoleProducer, auth.RoleWorker, auth.RoleOperator} {
			got, err := auth.ParseRole(string(r))
			require.NoError(t, err)
			require.Equal(t, r, got)
		}
		for _, s := range []string{"", "public", "Operator", "admin", "!exclusive"} {
			_, err := auth.ParseRole(s)
			require.Error(t, err, s)
		}
	})
}
