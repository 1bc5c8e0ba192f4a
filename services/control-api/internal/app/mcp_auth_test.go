package app_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"

	"github.com/pulsequeue/pulse/services/control-api/internal/mcpserver"
)

// withAuthorization sends every request with one Authorization header.
type withAuthorization struct {
	header string
	next   http.RoundTripper
}

func (w withAuthorization) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", w.header)
	return w.next.RoundTrip(r)
}

// mcpSession connects the SDK's client to /mcp as authorization.
func (b *authBundle) mcpSession(t *testing.T, authorization string) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "role-matrix", Version: "test"}, nil)
	hc := &http.Client{Transport: withAuthorization{header: authorization, next: b.http.Transport}}
	return client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: b.scheme + "://" + b.app.AdminAddr() + mcpserver.Path, HTTPClient: hc, DisableStandaloneSSE: true,
	}, nil)
}

// TestMCPRoleMatrix calls every MCP tool as every role: a role the tool
// does not admit gets a permission error naming the roles it needs and
// changes nothing; a role it admits gets past the check (to an answer, or
// to an error about its arguments). Without credentials the endpoint
// answers 401 before reading the body.
func TestMCPRoleMatrix(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, false)
	id := b.submitHTTP(t)

	// Arguments each tool accepts as valid, so an admitted call reaches
	// the service.
	args := map[string]map[string]any{
		mcpserver.ToolDispatchPause:  {"reason": "role matrix", "topic": "matrix.only"},
		mcpserver.ToolDispatchResume: {"topic": "matrix.only"},
		mcpserver.ToolJobGet:         {"id": id},
		mcpserver.ToolJobWhy:         {"id": id},
		mcpserver.ToolJobRetry:       {"id": id},
		mcpserver.ToolJobCancel:      {"id": id},
		mcpserver.ToolTopicGet:       {"topic": "auth.test"},
		mcpserver.ToolQueueClaim:     {"worker_id": "matrix", "topics": []string{"matrix.none"}},
		mcpserver.ToolQueueHeartbeat: {"worker_id": "matrix", "job_id": id, "attempt": 1},
		mcpserver.ToolQueueComplete:  {"worker_id": "matrix", "job_id": id, "attempt": 1},
		mcpserver.ToolQueueFail:      {"worker_id": "matrix", "job_id": id, "attempt": 1, "error": "no"},
	}
	creds := map[auth.Role]string{auth.RoleProducer: producer, auth.RoleWorker: worker, auth.RoleOperator: operator}
	sessions := map[auth.Role]*mcp.ClientSession{}
	for role, c := range creds {
		s, err := b.mcpSession(t, c)
		require.NoError(t, err, role)
		t.Cleanup(func() { _ = s.Close() })
		sessions[role] = s
	}

	listed, err := sessions[auth.RoleProducer].ListTools(t.Context(), nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range listed.Tools {
		names = append(names, tl.Name)
	}
	roles := mcpserver.ToolRoles()
	require.Len(t, names, len(roles), "every tool listed has roles and every role entry is a tool")
	for _, name := range names {
		require.Contains(t, roles, name)
	}

	for _, name := range names {
		for role, s := range sessions {
			res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args[name]})
			require.NoError(t, err, "%s as %s", name, role)
			text := ""
			for _, c := range res.Content {
				if tc, ok := c.(*mcp.TextContent); ok {
					text += tc.Text
				}
			}
			admitted := auth.Identity{Name: "x", Role: role}.Allowed(roles[name])
			denied := res.IsError && strings.HasPrefix(text, "permission_denied:")
			require.Equal(t, !admitted, denied, "%s as %s: %s", name, role, text)
			if denied {
				require.Contains(t, text, "may not call tool "+name, "%s as %s", name, role)
				require.Nil(t, res.StructuredContent, "a refused call answers nothing")
			}
		}
	}

	// The operator reaches every operator tool and no queue tool; the
	// worker only the queue tools; the producer only reads.
	require.True(t, slices.Contains(roles[mcpserver.ToolQueueClaim], auth.RoleWorker))
	require.False(t, auth.Identity{Role: auth.RoleOperator}.Allowed(roles[mcpserver.ToolQueueClaim]))
	require.False(t, auth.Identity{Role: auth.RoleProducer}.Allowed(roles[mcpserver.ToolDispatchPause]))

	t.Run("WithoutCredentials", func(t *testing.T) {
		_, err := b.mcpSession(t, "")
		require.Error(t, err)
		r := b.do(t, "POST", mcpserver.Path, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "")
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)
		r = b.do(t, "POST", mcpserver.Path, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, authtest.Basic("op", "wrong"))
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)
	})
}
