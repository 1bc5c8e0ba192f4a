package auth_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
)

// fakeClock is the clock the allowances refill by; tests move it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// refusals counts OnRefusal's reasons.
type refusals struct {
	mu sync.Mutex
	n  map[auth.Refusal]int
}

func (r *refusals) add(x auth.Refusal) { r.mu.Lock(); defer r.mu.Unlock(); r.n[x]++ }
func (r *refusals) get(x auth.Refusal) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[x]
}

func limited(t *testing.T, l auth.Limits) (*auth.Authenticator, *fakeClock, *refusals) {
	t.Helper()
	a := users(t)
	clock := &fakeClock{now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	l.Now = clock.Now
	a.SetLimits(l)
	r := &refusals{n: map[auth.Refusal]int{}}
	a.OnRefusal(r.add)
	return a, clock, r
}

func tapFrom(a *auth.Authenticator, ip, header string) error {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 5000}})
	md := metadata.MD{}
	if header != "" {
		md = metadata.Pairs("authorization", header)
	}
	_, err := auth.TapHandle(a, grpcPolicy)(ctx, &tap.Info{FullMethodName: submitMethod, Header: md})
	return err
}

func TestFailedAttemptsAreLimited(t *testing.T) {
	t.Parallel()

	t.Run("PerSourceAddressThenRefilled", func(t *testing.T) {
		t.Parallel()
		// One failure a second after a burst of three; users unlimited
		// enough not to interfere.
		a, clock, r := limited(t, auth.Limits{SourceRate: 1, SourceBurst: 3, UserRate: 100, UserBurst: 100})
		for i := range 3 {
			require.Equal(t, codes.Unauthenticated, status.Code(tapFrom(a, "192.0.2.7", authtest.Basic("u"+string(rune('a'+i)), "bad"))))
		}
		err := tapFrom(a, "192.0.2.7", authtest.Basic("prod", "pp"))
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "even good credentials wait: the answer must not tell a right guess")
		var hint *errdetails.RetryInfo
		for _, d := range status.Convert(err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				hint = ri
			}
		}
		require.NotNil(t, hint, "the refusal carries RetryInfo")
		require.Equal(t, time.Second, hint.GetRetryDelay().AsDuration())
		require.Equal(t, 1, r.get(auth.RefusalRateLimited))
		require.Equal(t, 3, r.get(auth.RefusalInvalid))

		require.NoError(t, tapFrom(a, "192.0.2.8", authtest.Basic("prod", "pp")), "another address is not limited")
		clock.Add(time.Second)
		require.NoError(t, tapFrom(a, "192.0.2.7", authtest.Basic("prod", "pp")), "refilled after the hint")
	})

	t.Run("PerUserName", func(t *testing.T) {
		t.Parallel()
		a, clock, _ := limited(t, auth.Limits{SourceRate: 100, SourceBurst: 100, UserRate: 0.5, UserBurst: 2})
		for i := range 2 {
			ip := net.IPv4(198, 51, 100, byte(i+1)).String()
			require.Equal(t, codes.Unauthenticated, status.Code(tapFrom(a, ip, authtest.Basic("prod", "guess"))))
		}
		require.Equal(t, codes.ResourceExhausted, status.Code(tapFrom(a, "198.51.100.9", authtest.Basic("prod", "pp"))),
			"the user's allowance is spent, whatever the address")
		require.NoError(t, tapFrom(a, "198.51.100.9", authtest.Basic("op", "oo")), "other users are not limited")
		clock.Add(2 * time.Second)
		require.NoError(t, tapFrom(a, "198.51.100.9", authtest.Basic("prod", "pp")))
	})

	t.Run("SuccessAndMissingCredentialsSpendNothing", func(t *testing.T) {
		t.Parallel()
		a, _, r := limited(t, auth.Limits{SourceRate: 0.001, SourceBurst: 1, UserRate: 0.001, UserBurst: 1})
		for range 20 {
			require.NoError(t, tapFrom(a, "192.0.2.1", authtest.Basic("prod", "pp")))
			require.Equal(t, codes.Unauthenticated, status.Code(tapFrom(a, "192.0.2.1", "")))
		}
		require.Equal(t, 20, r.get(auth.RefusalMissing))
		require.Equal(t, 0, r.get(auth.RefusalRateLimited))
	})

	t.Run("ForbiddenIsCountedAndNotLimited", func(t *testing.T) {
		t.Parallel()
		a, _, r := limited(t, auth.Limits{SourceRate: 0.001, SourceBurst: 1})
		for range 5 {
			require.Equal(t, codes.PermissionDenied, status.Code(tapFrom(a, "192.0.2.1", authtest.Basic("wk", "ww"))))
		}
		require.Equal(t, 5, r.get(auth.RefusalForbidden))
	})

	t.Run("TrackedKeysStayBounded", func(t *testing.T) {
		t.Parallel()
		a, clock, _ := limited(t, auth.Limits{SourceRate: 1, SourceBurst: 1, UserRate: 1, UserBurst: 1, MaxKeys: 4})
		// Four addresses fill the map; a fifth shares the overflow
		// allowance until the others have refilled and are pruned.
		for i := range 4 {
			require.Equal(t, codes.Unauthenticated, status.Code(tapFrom(a, net.IPv4(203, 0, 113, byte(i)).String(), "Bearer nope")))
		}
		require.Equal(t, codes.Unauthenticated, status.Code(tapFrom(a, "203.0.113.50", "Bearer nope")))
		require.Equal(t, codes.ResourceExhausted, status.Code(tapFrom(a, "203.0.113.51", "Bearer nope")),
			"beyond the bound, new addresses share one allowance")
		require.Equal(t, 4, auth.TrackedSources(a))
		clock.Add(time.Minute)
		require.Equal(t, codes.Unauthenticated, status.Code(tapFrom(a, "203.0.113.52", "Bearer nope")))
		require.Equal(t, 1, auth.TrackedSources(a), "refilled keys were pruned")
	})

	t.Run("HTTPAnswers429WithRetryAfter", func(t *testing.T) {
		t.Parallel()
		a, _, _ := limited(t, auth.Limits{SourceRate: 0.5, SourceBurst: 1})
		h := auth.Middleware(a, auth.HTTPPolicy(auth.Policy{"GET /v1/jobs": auth.Require(auth.RoleProducer)}))(
			http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
		get := func(header string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodGet, "/v1/jobs", nil)
			req.RemoteAddr = "192.0.2.44:1234"
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}
		require.Equal(t, http.StatusUnauthorized, get(authtest.Basic("prod", "bad")).Code)
		rec := get(authtest.Basic("prod", "pp"))
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		require.Equal(t, "2", rec.Header().Get("Retry-After"))
		require.Contains(t, rec.Body.String(), `"code":"resource_exhausted"`)
	})
}
