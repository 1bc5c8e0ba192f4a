package mcpserver_test

import (
	"testing"

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
	destructive := map[string]bool{mcpserver.ToolDispatchPause: true, mcpserver.ToolJobCancel: true, mcpserver.ToolTopicSetLimit: true}
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
