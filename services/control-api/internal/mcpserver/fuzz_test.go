package mcpserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/mcpserver"
)

// bundle is the MCP server on the real services over a fresh database,
// with a client session on an in-memory transport, calling as identity.
type bundle struct {
	*apitest.Bundle
	session *mcp.ClientSession
}

func setup(t testing.TB, id auth.Identity, open bool) *bundle {
	t.Helper()
	b := apitest.New(t, apitest.Options{})
	srv := mcpserver.New(mcpserver.Deps{
		Jobs: b.Service, Dispatch: api.NewDispatchControl(b.Store, api.DispatchOptions{}),
		Topics: api.NewTopicService(b.Store, nil), Queue: b.Store,
	}, mcpserver.Options{Open: open})
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(auth.WithIdentity(context.Background(), id))
	ss, err := srv.MCP().Connect(ctx, st, nil)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fuzz", Version: "test"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
		cancel()
	})
	return &bundle{Bundle: b, session: cs}
}

// rows counts what a tool may write: jobs and their state, pauses, the
// audit log, presence, topic limits and breakers.
func (b *bundle) rows(t testing.TB) string {
	t.Helper()
	var out string
	require.NoError(t, b.Pool.QueryRow(context.Background(), `SELECT concat_ws(',',
		(SELECT count(*) FROM jobs), (SELECT count(*) FROM jobs WHERE status <> 'PENDING'),
		(SELECT count(*) FROM dispatch_control WHERE paused), (SELECT count(*) FROM control_events),
		(SELECT count(*) FROM worker_presence), (SELECT count(*) FROM topic_limits), (SELECT count(*) FROM topic_breakers))`).Scan(&out))
	return out
}

var fuzzTools = []string{
	mcpserver.ToolDispatchStatus, mcpserver.ToolDispatchPause, mcpserver.ToolDispatchResume, mcpserver.ToolDispatchDrain,
	mcpserver.ToolDispatchEvents, mcpserver.ToolJobGet, mcpserver.ToolJobList, mcpserver.ToolJobWhy, mcpserver.ToolJobRetry,
	mcpserver.ToolJobCancel, mcpserver.ToolDeadLetters, mcpserver.ToolTopicList, mcpserver.ToolTopicGet, mcpserver.ToolTopicSetLimit,
	mcpserver.ToolQueueClaim, mcpserver.ToolQueueHeartbeat, mcpserver.ToolQueueComplete, mcpserver.ToolQueueFail,
	mcpserver.ToolTopicSetRateLimit, mcpserver.ToolTopicSetKeyLimits, mcpserver.ToolTopicBreakers, mcpserver.ToolTopicSetBreaker,
	mcpserver.ToolTopicClearBreaker,
}

// FuzzMCPTools sends arbitrary arguments to every tool, in open mode (so
// every tool is reached) against a real database, and holds every answer
// to two rules: never a failure of the server's own (internal or
// unavailable), and a tool error writes nothing.
func FuzzMCPTools(f *testing.F) {
	seeds := []struct {
		tool uint8
		args string
	}{
		{1, `{"reason":"upgrade","topic":"email.send","mode":"quiesce","for":"1h"}`},
		{1, `{"reason":"x","until":"2031-01-01T00:00:00Z","for":"1h"}`},
		{1, `{"reason":"\u0000","topic":"t"}`},
		{2, `{"topic":"email.send"}`},
		{4, `{"limit":500,"page_token":"!!"}`},
		{5, `{"id":"0190c0de-0000-7000-8000-000000000000"}`},
		{6, `{"status":"dead_lettered","args":{"a":[1,{"b":null}]},"limit":1}`},
		{6, `{"args":{"\u0000":1}}`},
		{12, `{"topic":"a.b-c_d"}`},
		{13, `{"topic":"t","max_running":0}`},
		{13, `{"topic":"t","max_running":null}`},
		{14, `{"worker_id":"w","topics":["t"],"lease_seconds":3600}`},
		{14, `{"worker_id":"w\ud800","topics":["t"]}`},
		{15, `{"worker_id":"w","job_id":"0190c0de-0000-7000-8000-000000000000","attempt":2147483647}`},
		{17, `{"worker_id":"w","job_id":"0190c0de-0000-7000-8000-000000000000","attempt":1,"error":"e","retry_after":"-1s"}`},
		{18, `{"topic":"t","rate_limit":10,"rate_interval":"1s","rate_key":"args:tenant"}`},
		{18, `{"topic":"t","rate_limit":10,"rate_interval":"-1s"}`},
		{18, `{"topic":"t","rate_limit":null}`},
		{19, `{"topic":"t","max_running_per_key":2,"sequence_on_failure":"block"}`},
		{19, `{"topic":"t","max_running_per_key":null,"sequence_on_failure":"\u0000"}`},
		{21, `{"topic":"t","failure_ratio":0.5,"window":"1m","min_volume":20,"cooldown":"30s"}`},
		{21, `{"topic":"t","failure_ratio":1e308,"window":"90s","min_volume":-1,"cooldown":"0s"}`},
		{22, `{"topic":"t"}`},
	}
	for _, s := range seeds {
		f.Add(s.tool, []byte(s.args))
	}
	b := setup(f, auth.Anonymous, true)
	f.Fuzz(func(t *testing.T, tool uint8, args []byte) {
		if !json.Valid(args) {
			return // the client sends JSON; the protocol's parser answers anything else
		}
		name := fuzzTools[int(tool)%len(fuzzTools)]
		before := b.rows(t)
		res, err := b.session.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
		if err != nil {
			// A protocol-level refusal (arguments that are not an object).
			require.NotContains(t, err.Error(), "internal", "%s %s", name, args)
			require.Equal(t, before, b.rows(t), "%s %s: a refused call wrote", name, args)
			return
		}
		if !res.IsError {
			return
		}
		text := res.Content[0].(*mcp.TextContent).Text
		require.False(t, strings.HasPrefix(text, "internal") || strings.HasPrefix(text, "unavailable"), "%s %s: %s", name, args, text)
		if strings.HasPrefix(text, "refused:") {
			return // a queue tool's fenced refusal: the statement changed nothing by construction
		}
		require.Equal(t, before, b.rows(t), "%s %s: a refused call wrote: %s", name, args, text)
	})
}

var mcpCallPause = mcp.CallToolParams{Name: mcpserver.ToolDispatchPause, Arguments: map[string]any{"reason": "not yours"}}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
