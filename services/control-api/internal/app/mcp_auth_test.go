package app_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"

	"github.com/pulsequeue/pulse/services/control-api/internal/app"
	"github.com/pulsequeue/pulse/services/control-api/internal/config"
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
	s, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: b.scheme + "://" + b.app.AdminAddr() + mcpserver.Path, HTTPClient: hc, DisableStandaloneSSE: true,
	}, nil)
	if err == nil {
		t.Cleanup(func() { _ = s.Close() })
	}
	return s, err
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
		mcpserver.ToolDispatchPause:     {"reason": "role matrix", "topic": "matrix.only"},
		mcpserver.ToolDispatchResume:    {"topic": "matrix.only"},
		mcpserver.ToolJobGet:            {"id": id},
		mcpserver.ToolJobWhy:            {"id": id},
		mcpserver.ToolJobRetry:          {"id": id},
		mcpserver.ToolJobCancel:         {"id": id},
		mcpserver.ToolTopicGet:          {"topic": "auth.test"},
		mcpserver.ToolTopicSetLimit:     {"topic": "matrix.limit", "max_running": 5},
		mcpserver.ToolTopicSetRateLimit: {"topic": "matrix.rate", "rate_limit": 5, "rate_interval": "1s"},
		mcpserver.ToolTopicSetKeyLimits: {"topic": "matrix.keys", "max_running_per_key": 2, "sequence_on_failure": ""},
		mcpserver.ToolTopicSetBreaker:   {"topic": "matrix.breaker", "failure_ratio": 0.5, "window": "1m", "min_volume": 20, "cooldown": "30s"},
		mcpserver.ToolTopicClearBreaker: {"topic": "matrix.breaker"},
		mcpserver.ToolQueueClaim:        {"worker_id": "matrix", "topics": []string{"matrix.none"}},
		mcpserver.ToolQueueHeartbeat:    {"worker_id": "matrix", "job_id": id, "attempt": 1},
		mcpserver.ToolQueueComplete:     {"worker_id": "matrix", "job_id": id, "attempt": 1},
		mcpserver.ToolQueueFail:         {"worker_id": "matrix", "job_id": id, "attempt": 1, "error": "no"},
	}
	creds := map[auth.Role]string{auth.RoleProducer: producer, auth.RoleWorker: worker, auth.RoleOperator: operator}
	sessions := map[auth.Role]*mcp.ClientSession{}
	for role, c := range creds {
		s, err := b.mcpSession(t, c)
		require.NoError(t, err, role)
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

// callTool calls name and returns whether it failed and its text.
func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) (isError bool, text string) {
	t.Helper()
	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, name)
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	return res.IsError, text
}

// TestMCPRefusesBadInput: what a hostile or broken agent sends is a tool
// error naming the argument, and writes nothing: no pause, no audit
// event, no presence, no lease.
func TestMCPRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, false)
	ops, err := b.mcpSession(t, operator)
	require.NoError(t, err)
	wk, err := b.mcpSession(t, worker)
	require.NoError(t, err)
	id := b.submitHTTP(t)

	cases := []struct {
		session *mcp.ClientSession
		tool    string
		args    map[string]any
		names   string // the argument the error names
	}{
		{ops, mcpserver.ToolDispatchPause, map[string]any{"reason": ""}, "reason"},
		{ops, mcpserver.ToolDispatchPause, map[string]any{"reason": "x", "mode": "nap"}, "mode"},
		{ops, mcpserver.ToolDispatchPause, map[string]any{"reason": "x", "for": "forever"}, "for"},
		{ops, mcpserver.ToolDispatchPause, map[string]any{"reason": "x", "for": "1h", "until": "2030-01-01T00:00:00Z"}, "until"},
		{ops, mcpserver.ToolDispatchPause, map[string]any{"reason": "x", "topic": "bad topic\x00"}, "topic"},
		{ops, mcpserver.ToolDispatchPause, map[string]any{"reason": strings.Repeat("r", 501)}, "reason"},
		{ops, mcpserver.ToolDispatchPause, map[string]any{"reason": 7}, "reason"},
		{ops, mcpserver.ToolDispatchEvents, map[string]any{"limit": 100000}, "limit"},
		{ops, mcpserver.ToolJobGet, map[string]any{"id": "not-a-uuid"}, "id"},
		{ops, mcpserver.ToolJobList, map[string]any{"status": "SLEEPING"}, "status"},
		{ops, mcpserver.ToolJobList, map[string]any{"args": []int{1}}, "args"},
		{ops, mcpserver.ToolJobList, map[string]any{"limit": -1}, "limit"},
		{ops, mcpserver.ToolJobCancel, map[string]any{}, "id"},
		{ops, mcpserver.ToolTopicGet, map[string]any{"topic": "\xff"}, "topic"},
		{ops, mcpserver.ToolTopicSetLimit, map[string]any{"topic": "t"}, "max_running"},
		{ops, mcpserver.ToolTopicSetLimit, map[string]any{"topic": "t", "max_running": -1}, "max_running"},
		{ops, mcpserver.ToolTopicSetLimit, map[string]any{"topic": "t", "max_running": 1e12}, "max_running"},
		{ops, mcpserver.ToolTopicSetRateLimit, map[string]any{"topic": "t"}, "rate_limit"},
		{ops, mcpserver.ToolTopicSetRateLimit, map[string]any{"topic": "t", "rate_limit": 0, "rate_interval": "1s"}, "rate_limit"},
		{ops, mcpserver.ToolTopicSetRateLimit, map[string]any{"topic": "t", "rate_limit": 5}, "rate_interval"},
		{ops, mcpserver.ToolTopicSetRateLimit, map[string]any{"topic": "t", "rate_limit": 5, "rate_interval": "soon"}, "rate_interval"},
		{ops, mcpserver.ToolTopicSetRateLimit, map[string]any{"topic": "t", "rate_limit": 5, "rate_interval": "1s", "rate_key": "tenant"}, "rate_key"},
		{ops, mcpserver.ToolTopicSetKeyLimits, map[string]any{"topic": "t", "max_running_per_key": 0, "sequence_on_failure": ""}, "max_running_per_key"},
		{ops, mcpserver.ToolTopicSetKeyLimits, map[string]any{"topic": "t", "max_running_per_key": nil, "sequence_on_failure": "sometimes"}, "sequence_on_failure"},
		{ops, mcpserver.ToolTopicSetBreaker, map[string]any{"topic": "t", "failure_ratio": 1.5, "window": "1m", "min_volume": 20, "cooldown": "30s"}, "failure_ratio"},
		{ops, mcpserver.ToolTopicSetBreaker, map[string]any{"topic": "t", "failure_ratio": 0.5, "window": "soon", "min_volume": 20, "cooldown": "30s"}, "window"},
		{ops, mcpserver.ToolTopicSetBreaker, map[string]any{"topic": "t", "failure_ratio": 0.5, "window": "1m", "min_volume": 0, "cooldown": "30s"}, "min_volume"},
		{ops, mcpserver.ToolTopicClearBreaker, map[string]any{"topic": "\xff"}, "topic"},
		{wk, mcpserver.ToolQueueClaim, map[string]any{"worker_id": "w", "topics": []string{}}, "topics"},
		{wk, mcpserver.ToolQueueClaim, map[string]any{"worker_id": "w", "topics": []string{"ok", "no spaces"}}, "topics[1]"},
		{wk, mcpserver.ToolQueueClaim, map[string]any{"worker_id": "w\x00", "topics": []string{"ok"}}, "worker_id"},
		{wk, mcpserver.ToolQueueClaim, map[string]any{"worker_id": strings.Repeat("w", 201), "topics": []string{"ok"}}, "worker_id"},
		{wk, mcpserver.ToolQueueClaim, map[string]any{"worker_id": "w", "topics": []string{"ok"}, "lease_seconds": 5}, "lease_seconds"},
		{wk, mcpserver.ToolQueueClaim, map[string]any{"worker_id": "w", "topics": []string{"ok"}, "lease_seconds": 1 << 40}, "lease_seconds"},
		{wk, mcpserver.ToolQueueHeartbeat, map[string]any{"worker_id": "w", "job_id": id, "attempt": 0}, "attempt"},
		{wk, mcpserver.ToolQueueComplete, map[string]any{"worker_id": "w", "job_id": "x", "attempt": 1}, "job_id"},
		{wk, mcpserver.ToolQueueFail, map[string]any{"worker_id": "w", "job_id": id, "attempt": 1}, "error"},
		{wk, mcpserver.ToolQueueFail, map[string]any{"worker_id": "w", "job_id": id, "attempt": 1, "error": "e", "retry_after": "soon"}, "retry_after"},
		{wk, mcpserver.ToolQueueFail, map[string]any{"worker_id": "w", "job_id": id, "attempt": 1, "error": "e", "permanent": true, "retry_after": "1s"}, "retry_after"},
	}
	for _, tc := range cases {
		failed, text := callTool(t, tc.session, tc.tool, tc.args)
		require.True(t, failed, "%s %v: %s", tc.tool, tc.args, text)
		require.Contains(t, text, tc.names, "%s %v names the argument", tc.tool, tc.args)
	}

	// Nothing was written: no pause, no audit event, no presence, and
	// the job is still waiting.
	failed, text := callTool(t, ops, mcpserver.ToolDispatchEvents, nil)
	require.False(t, failed, text)
	require.Contains(t, text, "no pause or resume recorded")
	failed, text = callTool(t, ops, mcpserver.ToolDispatchStatus, nil)
	require.False(t, failed, text)
	require.Contains(t, text, "nothing is paused")
	failed, text = callTool(t, ops, mcpserver.ToolJobGet, map[string]any{"id": id})
	require.False(t, failed, text)
	require.Contains(t, text, "is PENDING")
	failed, text = callTool(t, ops, mcpserver.ToolJobWhy, map[string]any{"id": id})
	require.False(t, failed, text)
	require.Contains(t, text, "no connected worker", "no claim recorded presence for the job's topic")

	// The calls that reached their tool are counted by outcome.
	r := b.do(t, "GET", "/metrics", "", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, `pulse_mcp_tool_calls_total{outcome="invalid_argument",tool="dispatch.pause"}`)
	require.Contains(t, r.body, `pulse_mcp_tool_calls_total{outcome="ok",tool="jobs.why_not_running"} 1`)

	// A worker may not read the resources; a producer may.
	_, err = wk.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "pulse://jobs/" + id})
	require.ErrorContains(t, err, "permission_denied")
	prod, err := b.mcpSession(t, producer)
	require.NoError(t, err)
	read, err := prod.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "pulse://jobs/" + id})
	require.NoError(t, err)
	require.Contains(t, read.Contents[0].Text, id)
	_, err = prod.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "pulse://jobs/0190c0de-0000-7000-8000-000000000000"})
	require.ErrorContains(t, err, "not found")
}

// endless is a body that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// TestMCPBoundsBodies: an unauthenticated request is answered 401 from
// its headers, whatever its body (an endless one here: a server that read
// it would never answer), and an authenticated body past the bound is
// refused 413.
func TestMCPBoundsBodies(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, false)
	url := b.scheme + "://" + b.app.AdminAddr() + mcpserver.Path
	for _, authorization := range []string{"", authtest.Basic("op", "wrong")} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, endless{})
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := b.http.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.NoError(t, resp.Body.Close())
	}

	// Stateless: no stream to open, no session to end.
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		r := b.do(t, method, mcpserver.Path, "", operator)
		require.Equal(t, http.StatusMethodNotAllowed, r.status, "%s: %s", method, r.body)
	}

	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"jobs.get","arguments":{"id":"` +
		strings.Repeat("a", mcpserver.MaxBodyBytes) + `"}}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(big))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", operator)
	resp, err := b.http.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
}

// TestMCPOpenMode: with authentication off everyone is admitted, as on
// every route, and an agent worker's lease is held as its worker id
// alone, as a gateway holds it in open mode.
func TestMCPOpenMode(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Auth = "none"
	cfg.DatabaseURL = pgtest.URL(t)
	cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	a, err := app.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, a.Start(t.Context()))
	defer func() { require.NoError(t, a.Stop(context.Background())) }()
	b := &authBundle{app: a, scheme: "http", http: &http.Client{Transport: &http.Transport{}}}
	s, err := b.mcpSession(t, "")
	require.NoError(t, err)
	r := b.do(t, "POST", "/v1/jobs", `{"topic":"open.mcp"}`, "")
	require.Equal(t, http.StatusCreated, r.status, r.body)

	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolQueueClaim,
		Arguments: map[string]any{"worker_id": "solo", "topics": []string{"open.mcp"}}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	job := res.StructuredContent.(map[string]any)["job"].(map[string]any)
	res, err = s.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolJobGet, Arguments: map[string]any{"id": job["id"]}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.Equal(t, "solo", res.StructuredContent.(map[string]any)["locked_by"])
	res, err = s.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolQueueComplete,
		Arguments: map[string]any{"worker_id": "solo", "job_id": job["id"], "attempt": job["attempt"]}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.Equal(t, "COMPLETED", res.StructuredContent.(map[string]any)["status"])
}

// TestMCPDrainProgress: a topic's progress towards drained, before its
// first pause (no scope row yet: the topic's own counts) and after.
func TestMCPDrainProgress(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, false)
	ops, err := b.mcpSession(t, operator)
	require.NoError(t, err)
	b.submitHTTP(t) // topic auth.test
	progress := func() map[string]any {
		t.Helper()
		res, err := ops.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolDispatchDrain, Arguments: map[string]any{"topic": "auth.test"}})
		require.NoError(t, err)
		require.False(t, res.IsError)
		return res.StructuredContent.(map[string]any)
	}
	p := progress()
	require.Equal(t, false, p["paused"])
	require.InDelta(t, 1, p["queued"], 0)
	require.Equal(t, false, p["drained"])

	failed, text := callTool(t, ops, mcpserver.ToolDispatchPause, map[string]any{"topic": "auth.test", "reason": "drain it"})
	require.False(t, failed, text)
	p = progress()
	require.Equal(t, true, p["paused"])
	require.Equal(t, "drain it", p["reason"])
	require.InDelta(t, 1, p["queued"], 0)
	require.Equal(t, true, p["drained"], "paused with nothing running")

	// The audit names the agent's credential, as over HTTP.
	res, err := ops.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolDispatchEvents})
	require.NoError(t, err)
	events := res.StructuredContent.(map[string]any)["events"].([]any)
	require.Equal(t, "op", events[0].(map[string]any)["actor"])
	require.Equal(t, "drain it", events[0].(map[string]any)["reason"])
}

// TestMCPAgentsClaimDisjointJobs: agent workers claiming at once, each
// over its own session, take every job exactly once and settle it.
func TestMCPAgentsClaimDisjointJobs(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, false)
	const jobs, agents = 24, 4
	for range jobs {
		r := b.do(t, "POST", "/v1/jobs", `{"topic":"agents.race"}`, producer)
		require.Equal(t, http.StatusCreated, r.status, r.body)
	}
	claimed := make(chan string, jobs*2)
	var wg sync.WaitGroup
	for i := range agents {
		s, err := b.mcpSession(t, worker)
		require.NoError(t, err)
		workerID := "agent-" + strconv.Itoa(i)
		wg.Go(func() {
			for {
				res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolQueueClaim,
					Arguments: map[string]any{"worker_id": workerID, "topics": []string{"agents.race"}}})
				if !assert.NoError(t, err) || !assert.False(t, res.IsError) { //nolint:forbidigo // require must not stop the test from another goroutine
					return
				}
				job, _ := res.StructuredContent.(map[string]any)["job"].(map[string]any)
				if job == nil {
					return
				}
				claimed <- job["id"].(string)
				res, err = s.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolQueueComplete,
					Arguments: map[string]any{"worker_id": workerID, "job_id": job["id"], "attempt": job["attempt"]}})
				if !assert.NoError(t, err) || !assert.False(t, res.IsError, "complete %v", job["id"]) { //nolint:forbidigo // require must not stop the test from another goroutine
					return
				}
			}
		})
	}
	wg.Wait()
	close(claimed)
	seen := map[string]bool{}
	for id := range claimed {
		require.False(t, seen[id], "job %s claimed twice", id)
		seen[id] = true
	}
	require.Len(t, seen, jobs)
}
