package app

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// submitGraph submits a chain a -> b of topic as one batch (a workflow)
// over the HTTP API, as a producer, and returns the jobs' ids.
func submitGraph(t *testing.T, topic string) []string {
	t.Helper()
	body := `{"jobs":[{"topic":"` + topic + `"},{"topic":"` + topic + `.next","depends_on":["$0"]}]}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, server+"/v1/jobs:batch", bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.SetBasicAuth("prod", "pw")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var res pulsehttp.BatchResult
	require.NoError(t, decode(raw, &res))
	return []string{res.Results[0].ID, res.Results[1].ID}
}

func TestWorkflowCommands(t *testing.T) {
	t.Parallel()
	ids := submitGraph(t, "cli.wf")

	out := ok(t, prod("workflow", "get", ids[0])...)
	require.Regexp(t, `(?m)^Status:\s+running$`, out)
	require.Contains(t, out, "2: 2 pending (1 waiting for parents)", out)

	var wf pulsehttp.Workflow
	okJSON(t, &wf, prod("workflow", "get", ids[0])...)
	require.Equal(t, "running", wf.Status)
	require.Equal(t, "cli.wf", wf.Topic)

	var list pulsehttp.WorkflowList
	okJSON(t, &list, prod("workflow", "list", "--status", "RUNNING")...)
	var listed bool
	for _, w := range list.Workflows {
		listed = listed || w.ID == ids[0]
	}
	require.True(t, listed, "%+v", list)
	out = ok(t, prod("workflows", "list", "--limit", "1")...)
	require.Equal(t, []string{"ID", "STATUS", "TOPIC", "SUBMITTED"}, strings.Fields(strings.SplitN(out, "\n", 2)[0]), out)

	out = ok(t, ops("workflow", "cancel", ids[0])...)
	require.Equal(t, ids[0]+": canceled 2 job(s); now canceled\n", out)
	out = ok(t, ops("workflow", "retry", ids[0])...)
	require.Equal(t, ids[0]+": retried 2 job(s); now running\n", out)
}

func TestWorkflowBadInput(t *testing.T) {
	t.Parallel()
	ids := submitGraph(t, "cli.wfbad")
	for _, tc := range []struct {
		name string
		args []string
		want string
		code int
	}{
		{"unknown status", prod("workflow", "list", "--status", "broken"), "--status must be one of", ExitUsage},
		{"not an id", prod("workflow", "get", "nope"), "id", ExitError},
		{"unknown workflow", prod("workflow", "get", "01936c4e-0000-7000-8000-000000000000"), "not found", ExitError},
		{"producer cancels", prod("workflow", "cancel", ids[0]), "operator", ExitError},
		{"producer retries", prod("workflow", "retry", ids[0]), "operator", ExitError},
		{"nothing to retry", ops("workflow", "retry", ids[0]), "no dead-lettered or canceled job", ExitError},
		{"bad page token", prod("workflow", "list", "--page-token", "x"), "page_token", ExitError},
		{"missing id", prod("workflow", "get"), "arg", ExitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := pulse(t, "", tc.args...)
			line := failLine(t, r)
			require.Contains(t, line, tc.want)
			require.Equal(t, tc.code, r.code, line)
		})
	}
}
