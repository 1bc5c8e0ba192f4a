package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// mcpTools are the tools control-api's /mcp lists.
var mcpTools = []string{
	"dispatch.status", "dispatch.pause", "dispatch.resume", "dispatch.drain_progress", "dispatch.events",
	"jobs.get", "jobs.list", "jobs.why_not_running", "jobs.retry", "jobs.cancel", "jobs.dead_letters",
	"topics.list", "topics.get", "topics.set_limit",
	"topics.set_rate_limit", "topics.set_key_limits", "topics.breakers", "topics.set_breaker", "topics.clear_breaker",
	"queue.claim", "queue.heartbeat", "queue.complete", "queue.fail",
}

// basicAuth sends every request with a user's Basic credentials.
type basicAuth struct{ user, pass string }

func (b basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.user, b.pass)
	return http.DefaultTransport.RoundTrip(r)
}

// TestAgentsOperateAndWorkOverMCP (ADR-0040): real binaries, authentication
// on, the official Go SDK's MCP client, once over streamable HTTP to
// control-api's /mcp and once over the stdio of `pulse mcp` (the CLI
// binary, proxying to /mcp with its own credentials). An operator agent
// lists the tools and pauses a topic; an agent worker claims, heartbeats
// and completes a job with the system envelope following the pause, sees
// its claims stop while paused and resume after; another worker identity,
// a forged attempt and a lease the reaper took back are refused and
// change nothing; a producer may not pause.
func TestAgentsOperateAndWorkOverMCP(t *testing.T) {
	t.Parallel()
	f := upPauseFleet(t, localfleet.Options{Binaries: binaries(t), Reaper: true, Env: map[string]string{
		"PULSE_AUTH_USERS":     "ops:operator:ops-pw,pat:producer:pat-pw,agent:worker:agent-pw,mallory:worker:mallory-pw",
		"PULSE_SWEEP_INTERVAL": "100ms",
	}})
	cli, err := cliBinary()
	require.NoError(t, err)

	transports := map[string]func(t *testing.T, user, pass string) *mcp.ClientSession{
		"StreamableHTTP": func(t *testing.T, user, pass string) *mcp.ClientSession {
			return connectMCP(t, &mcp.StreamableClientTransport{Endpoint: f.ControlHTTP + "/mcp",
				HTTPClient: &http.Client{Transport: basicAuth{user, pass}}, DisableStandaloneSSE: true})
		},
		"CLIStdio": func(t *testing.T, user, pass string) *mcp.ClientSession {
			cmd := exec.Command(cli, "mcp")
			home := t.TempDir()
			cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home, "PATH=" + os.Getenv("PATH"),
				"PULSE_SERVER=" + f.ControlHTTP, "PULSE_USER=" + user, "PULSE_PASSWORD=" + pass}
			cmd.Stderr = os.Stderr
			return connectMCP(t, &mcp.CommandTransport{Command: cmd})
		},
	}
	for name, connect := range transports {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			topic := "e2e.mcp." + strings.ToLower(name)
			ops, pat := connect(t, "ops", "ops-pw"), connect(t, "pat", "pat-pw")
			agent, mallory := connect(t, "agent", "agent-pw"), connect(t, "mallory", "mallory-pw")

			// The tools, with their schemas and annotations.
			listed, err := ops.ListTools(t.Context(), nil)
			require.NoError(t, err)
			byName := map[string]*mcp.Tool{}
			for _, tl := range listed.Tools {
				byName[tl.Name] = tl
			}
			require.Len(t, byName, len(mcpTools))
			for _, name := range mcpTools {
				require.Contains(t, byName, name)
				require.NotNil(t, byName[name].InputSchema, name)
				require.NotNil(t, byName[name].OutputSchema, name)
			}
			require.True(t, *byName["dispatch.pause"].Annotations.DestructiveHint)
			require.True(t, *byName["jobs.cancel"].Annotations.DestructiveHint)
			require.True(t, byName["dispatch.status"].Annotations.ReadOnlyHint)

			var ids []string
			for i := range 3 {
				var s struct {
					ID string `json:"id"`
				}
				require.Equal(t, http.StatusCreated, f.call(http.MethodPost, f.ControlHTTP+"/v1/jobs",
					`{"topic":"`+topic+`","args":{"n":`+strconv.Itoa(i)+`}}`, "pat:pat-pw", &s))
				ids = append(ids, s.ID)
			}

			// The agent worker claims the first job, in submit order.
			claim := callOK(t, agent, "queue.claim", map[string]any{"worker_id": "agent-1", "topics": []string{topic}, "lease_seconds": 120})
			job := claim["job"].(map[string]any)
			require.Equal(t, ids[0], job["id"])
			require.InDelta(t, 0, job["args"].(map[string]any)["n"], 0)
			attempt := job["attempt"]
			require.Equal(t, false, claim["system"].(map[string]any)["paused"])
			ref := map[string]any{"worker_id": "agent-1", "job_id": ids[0], "attempt": attempt}
			// The worker id is the agent's while its presence lives: another
			// identity claiming as it is refused.
			taken := callErr(t, mallory, "queue.claim", map[string]any{"worker_id": "agent-1", "topics": []string{topic}})
			require.Contains(t, taken, "already_exists")
			beat := callOK(t, agent, "queue.heartbeat", ref)
			require.Equal(t, true, beat["lease_held"])
			require.Equal(t, false, beat["quiesced"])

			// A producer may not pause; an operator quiesces the topic.
			denied := callErr(t, pat, "dispatch.pause", map[string]any{"topic": topic, "reason": "not yours"})
			require.Contains(t, denied, "permission_denied")
			require.Contains(t, denied, "needs operator")
			paused := callOK(t, ops, "dispatch.pause", map[string]any{"topic": topic, "mode": "quiesce", "reason": "mcp e2e", "for": "1h"})
			require.Equal(t, true, paused["changed"])

			// The envelope follows: the held job is quiesced, claims stop.
			beat = callOK(t, agent, "queue.heartbeat", ref)
			require.Equal(t, true, beat["quiesced"])
			sys := beat["system"].(map[string]any)
			require.Equal(t, true, sys["paused"])
			require.Equal(t, "quiesce", sys["mode"])
			require.Equal(t, "mcp e2e", sys["reason"])
			claim = callOK(t, agent, "queue.claim", map[string]any{"worker_id": "agent-1", "topics": []string{topic}})
			require.Nil(t, claim["job"], "no claim while the topic is paused")
			require.Equal(t, true, claim["system"].(map[string]any)["paused"])
			why := callOK(t, ops, "jobs.why_not_running", map[string]any{"id": ids[1]})
			require.Equal(t, "paused", why["waiting"].(map[string]any)["reason"])

			// Another worker identity, and a forged attempt, settle nothing.
			refused := callErr(t, mallory, "queue.complete", ref)
			require.Contains(t, refused, "refused")
			forged := map[string]any{"worker_id": "agent-1", "job_id": ids[0], "attempt": 7}
			require.Contains(t, callErr(t, agent, "queue.complete", forged), "refused")
			require.Contains(t, callErr(t, agent, "queue.fail", map[string]any{"worker_id": "agent-1", "job_id": "not-a-uuid", "attempt": 1, "error": "x"}), "job_id")
			require.Equal(t, "RUNNING", callOK(t, ops, "jobs.get", map[string]any{"id": ids[0]})["status"])

			// The agent completes its job, still under the pause.
			done := callOK(t, agent, "queue.complete", ref)
			require.Equal(t, "COMPLETED", done["status"])
			require.Equal(t, true, done["system"].(map[string]any)["paused"])
			read, err := ops.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "pulse://jobs/" + ids[0]})
			require.NoError(t, err)
			require.Contains(t, read.Contents[0].Text, `"status":"COMPLETED"`)

			// Resume: claims start again, the envelope says so.
			require.Equal(t, true, callOK(t, ops, "dispatch.resume", map[string]any{"topic": topic})["changed"])
			claim = callOK(t, agent, "queue.claim", map[string]any{"worker_id": "agent-1", "topics": []string{topic}, "lease_seconds": 10})
			require.Equal(t, ids[1], claim["job"].(map[string]any)["id"])
			require.Equal(t, false, claim["system"].(map[string]any)["paused"])
			second := map[string]any{"worker_id": "agent-1", "job_id": ids[1], "attempt": claim["job"].(map[string]any)["attempt"]}

			// The agent goes quiet: its 10 s lease lapses and the reaper
			// retries the job like any other; the old lease is refused.
			require.Eventually(t, func() bool {
				return callOK(t, ops, "jobs.get", map[string]any{"id": ids[1]})["status"] != "RUNNING"
			}, proctest.Patience, 100*time.Millisecond, "the reaper takes back the lapsed lease")
			require.Equal(t, "RETRYING", callOK(t, ops, "jobs.get", map[string]any{"id": ids[1]})["status"])
			require.Contains(t, callErr(t, agent, "queue.heartbeat", second), "holds no lease")
			require.Contains(t, callErr(t, agent, "queue.complete", second), "refused")
			require.Equal(t, "RETRYING", callOK(t, ops, "jobs.get", map[string]any{"id": ids[1]})["status"])
		})
	}
}

func connectMCP(t *testing.T, transport mcp.Transport) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Patience)
	defer cancel()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "test"}, nil).Connect(ctx, transport, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// callOK calls a tool that must succeed and returns its structured answer.
func callOK(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	res := call(t, s, name, args)
	require.False(t, res.IsError, "%s: %s", name, text(res))
	require.NotEmpty(t, text(res), "%s has a text summary", name)
	var out map[string]any
	require.NoError(t, json.Unmarshal(mustJSON(t, res.StructuredContent), &out))
	return out
}

// callErr calls a tool that must answer a tool error and returns its text.
func callErr(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res := call(t, s, name, args)
	require.True(t, res.IsError, "%s should have failed: %s", name, text(res))
	return text(res)
}

func call(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Patience)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, name)
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
