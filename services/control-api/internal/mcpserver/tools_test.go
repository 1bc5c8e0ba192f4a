package mcpserver_test

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"

	"github.com/pulsequeue/pulse/services/control-api/internal/mcpserver"
)

// TestToolsDeclareWhatAClientNeeds: every listed tool has roles, input and
// output schemas, a description and annotations, and the annotations say
// which tools only read and which destroy.
func TestToolsDeclareWhatAClientNeeds(t *testing.T) {
	t.Parallel()
	b := setup(t, auth.Identity{Name: "op", Role: auth.RoleOperator}, false)
	listed, err := b.session.ListTools(t.Context(), nil)
	require.NoError(t, err)
	roles := mcpserver.ToolRoles()
	require.Len(t, listed.Tools, len(roles))
	destructive := map[string]bool{mcpserver.ToolDispatchPause: true, mcpserver.ToolJobCancel: true, mcpserver.ToolTopicSetLimit: true,
		mcpserver.ToolTopicSetRateLimit: true, mcpserver.ToolTopicSetKeyLimits: true, mcpserver.ToolTopicSetBreaker: true,
		mcpserver.ToolTopicClearBreaker: true}
	for _, tl := range listed.Tools {
		require.Contains(t, roles, tl.Name)
		require.NotEmpty(t, tl.Description, tl.Name)
		require.NotNil(t, tl.InputSchema, tl.Name)
		require.NotNil(t, tl.OutputSchema, tl.Name)
		require.NotNil(t, tl.Annotations, tl.Name)
		readOnly := auth.Identity{Role: auth.RoleProducer}.Allowed(roles[tl.Name])
		require.Equal(t, readOnly, tl.Annotations.ReadOnlyHint, "%s: the tools producers may call are the read-only ones", tl.Name)
		if !readOnly {
			require.NotNil(t, tl.Annotations.DestructiveHint, tl.Name)
			require.Equal(t, destructive[tl.Name], *tl.Annotations.DestructiveHint, tl.Name)
		}
	}
	// The bounds are in the schema, not only in the handler.
	for _, tl := range listed.Tools {
		if tl.Name == mcpserver.ToolQueueClaim {
			props := tl.InputSchema.(map[string]any)["properties"].(map[string]any)
			require.InDelta(t, mcpserver.LeaseMax.Seconds(), props["lease_seconds"].(map[string]any)["maximum"], 0)
		}
	}
}

// TestAToolRefusesARoleItDoesNotAdmit, without HTTP: the check is the
// server's own, not only the route's.
func TestAToolRefusesARoleItDoesNotAdmit(t *testing.T) {
	t.Parallel()
	b := setup(t, auth.Identity{Name: "pat", Role: auth.RoleProducer}, false)
	before := b.rows(t)
	res, err := b.session.CallTool(t.Context(), &mcpCallPause)
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, textOf(res), "permission_denied: role producer may not call tool dispatch.pause; it needs operator")
	require.Equal(t, before, b.rows(t))
}

// TestFlowControlTools: an operator sets a topic's rate limit, per-key
// limits and circuit breaker over MCP, sees them on the topic and in the
// breaker list, and clears them; the settings are the ones the claim
// reads (topic_limits, topic_breakers), recorded with the actor.
func TestFlowControlTools(t *testing.T) {
	t.Parallel()
	b := setup(t, auth.Identity{Name: "olga", Role: auth.RoleOperator}, false)
	call := func(name string, args map[string]any) string {
		t.Helper()
		res, err := b.session.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err, name)
		require.False(t, res.IsError, "%s: %s", name, textOf(res))
		return textOf(res)
	}
	require.Contains(t, call(mcpserver.ToolTopicSetRateLimit, map[string]any{"topic": "api.call", "rate_limit": 100, "rate_interval": "1m", "rate_key": "args:tenant"}),
		"api.call starts at most 100 jobs per 1m0s (counted by args:tenant)")
	require.Contains(t, call(mcpserver.ToolTopicSetKeyLimits, map[string]any{"topic": "report.build", "max_running_per_key": 2, "sequence_on_failure": "block"}),
		"report.build: at most 2 running per key; sequences, block on failure")
	var rate, perKey int
	var rateKey, by string
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT rate_limit, rate_key, updated_by FROM topic_limits WHERE topic = 'api.call'`).
		Scan(&rate, &rateKey, &by))
	require.Equal(t, []any{100, "args:tenant", "olga"}, []any{rate, rateKey, by})
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT max_running_per_key FROM topic_limits WHERE topic = 'report.build'`).Scan(&perKey))
	require.Equal(t, 2, perKey)
	// A rate limit and per-key limits on one topic are refused, naming the field.
	res, err := b.session.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolTopicSetKeyLimits,
		Arguments: map[string]any{"topic": "api.call", "max_running_per_key": 2, "sequence_on_failure": ""}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, textOf(res), "invalid_argument: max_running_per_key")

	require.Contains(t, call(mcpserver.ToolTopicSetBreaker, map[string]any{"topic": "api.call", "failure_ratio": 0.5, "window": "1m", "min_volume": 20, "cooldown": "30s"}),
		"api.call opens when 50% of at least 20 attempts within 1m0s fail, for 30s; now closed")
	require.Contains(t, call(mcpserver.ToolTopicBreakers, nil), "1 breakers, 0 not closed")

	require.Contains(t, call(mcpserver.ToolTopicSetRateLimit, map[string]any{"topic": "api.call", "rate_limit": nil}), "api.call has no rate limit")
	require.Contains(t, call(mcpserver.ToolTopicClearBreaker, map[string]any{"topic": "api.call"}), "api.call has no breaker now")
	res, err = b.session.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolTopicClearBreaker, Arguments: map[string]any{"topic": "api.call"}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, textOf(res), "not_found", "clearing a breaker that is not there is refused")
	require.Contains(t, call(mcpserver.ToolTopicBreakers, nil), "0 breakers")
}
