package app

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// TestMCPServesControlAPIsToolsOverStdio runs `pulse mcp` in-process on
// pipes, with the SDK's client on the other end: it lists control-api's
// tools and resources, forwards calls with the command's credentials (an
// operator's here, so a queue tool answers permission_denied, as
// control-api says), and ends cleanly when its stdin closes.
func TestMCPServesControlAPIsToolsOverStdio(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), proctest.Patience)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := Run(ctx, ops("mcp"), inR, outW, &stderr)
		_ = outW.Close()
		done <- code
	}()

	session, err := mcp.NewClient(&mcp.Implementation{Name: "cli-test", Version: "test"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	require.NoError(t, err, stderr.String())
	tools, err := session.ListTools(ctx, nil)
	require.NoError(t, err)
	names := map[string]*mcp.Tool{}
	for _, tl := range tools.Tools {
		names[tl.Name] = tl
	}
	require.Contains(t, names, "dispatch.pause")
	require.Contains(t, names, "queue.claim")
	require.True(t, *names["dispatch.pause"].Annotations.DestructiveHint, "annotations come through")

	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "dispatch.status"})
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.NotNil(t, res.StructuredContent)
	res, err = session.CallTool(ctx, &mcp.CallToolParams{Name: "queue.claim", Arguments: map[string]any{"worker_id": "w", "topics": []string{"t"}}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, res.Content[0].(*mcp.TextContent).Text, "permission_denied")
	read, err := session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "pulse://dispatch"})
	require.NoError(t, err)
	require.Contains(t, read.Contents[0].Text, `"scopes"`)

	require.NoError(t, session.Close())
	require.Equal(t, ExitOK, <-done, stderr.String())
}

func TestMCPRefusesWhatItCannotConnectWith(t *testing.T) {
	t.Parallel()
	r := pulse(t, "", "mcp")
	require.Equal(t, ExitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "no server")
	require.Empty(t, r.stdout, "nothing but MCP on stdout")

	r = pulse(t, "", as("ops", "wrong", "mcp")...)
	require.Equal(t, ExitError, r.code)
	require.Contains(t, r.stderr, "cannot connect to "+server+"/mcp")
	require.Empty(t, r.stdout)

	r = pulse(t, "", "--server", "http://pulse.example.com", "--user", "ops", "--password", "x", "mcp")
	require.Equal(t, ExitUsage, r.code, r.stderr)
	require.True(t, strings.Contains(r.stderr, "plain"), r.stderr)
}
