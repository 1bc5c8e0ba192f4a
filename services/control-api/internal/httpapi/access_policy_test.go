package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"

	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

// patterns records what Register mounts.
type patterns []string

func (p *patterns) Handle(pattern string, _ http.Handler) { *p = append(*p, pattern) }

func TestAccessPolicy(t *testing.T) {
	t.Parallel()

	t.Run("NamesEveryRouteRegisterMounts", func(t *testing.T) {
		t.Parallel()
		var mounted patterns
		h := httpapi.New(nil, httpapi.Options{})
		h.Register(&mounted)
		h.RegisterTopics(&mounted, nil)
		h.RegisterWorkflows(&mounted, nil)
		require.NotEmpty(t, mounted)
		policy := httpapi.AccessPolicy()
		for _, p := range mounted {
			require.Contains(t, policy, p, "decide who may call %s", p)
		}
	})

	t.Run("KeepsProbesOpenAndStateChangesForOperators", func(t *testing.T) {
		t.Parallel()
		policy := auth.HTTPPolicy(httpapi.AccessPolicy())
		roles := func(method, path string) []auth.Role {
			r, err := http.NewRequest(method, "http://x"+path, nil)
			require.NoError(t, err)
			return policy(r)
		}
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			require.Equal(t, []auth.Role{auth.Public}, roles("GET", path), path)
		}
		producer := auth.Require(auth.RoleProducer)
		operator := auth.Require(auth.RoleOperator)
		cases := []struct {
			method, path string
			want         []auth.Role
		}{
			{"POST", "/v1/jobs", producer},
			{"POST", "/v1/jobs:batch", producer},
			{"GET", "/v1/jobs", producer},
			{"GET", "/v1/jobs/0190", producer},
			{"POST", "/v1/jobs/0190/cancel", operator},
			{"POST", "/v1/jobs/0190/retry", operator},
			{"GET", "/v1/workflows", producer},
			{"GET", "/v1/workflows/0190", producer},
			{"POST", "/v1/workflows/0190/cancel", operator},
			{"POST", "/v1/workflows/0190/retry", operator},
			{"GET", "/v1/dispatch", producer},
			{"GET", "/v1/dispatch/events", producer},
			{"POST", "/v1/dispatch/pause", operator},
			{"POST", "/v1/dispatch/resume", operator},
			{"GET", "/v1/topics", producer},
			{"GET", "/v1/topics/email.send", producer},
			{"PUT", "/v1/topics/email.send", operator},
			{"PUT", "/v1/topics/email.send/rate-limit", operator},
			// MCP: every role reaches the endpoint, each tool checks its own.
			{"POST", "/mcp", auth.Require(auth.RoleProducer, auth.RoleWorker)},
			{"GET", "/mcp", auth.Require(auth.RoleProducer, auth.RoleWorker)},
			{"POST", "/mcp/x", nil},
			// A wrong method or an unknown path under /v1/ reaches the
			// fallback, which answers 405 or 404 and runs nothing.
			{"POST", "/v1/dispatch", producer},
			{"GET", "/v1/nope", producer},
			{"GET", "/", nil},
		}
		for _, tc := range cases {
			require.Equal(t, tc.want, roles(tc.method, tc.path), "%s %s", tc.method, tc.path)
		}
	})
}
