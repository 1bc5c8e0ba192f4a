package api_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
)

// The workflow calls over gRPC: a diamond submitted in one SubmitJobs
// call is one workflow; its status follows its jobs; cancel and retry act
// on it; bad ids, filters and tokens are refused naming the field.
func TestWorkflowCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	dep := func(n string) []*pulsev1.Dependency { return []*pulsev1.Dependency{{Job: n}} }
	resp, err := b.client.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{Jobs: []*pulsev1.JobSpec{
		{Topic: "wf.a"},
		{Topic: "wf.b", DependsOn: dep("$0")},
		{Topic: "wf.c", DependsOn: dep("$0")},
		{Topic: "wf.d", DependsOn: []*pulsev1.Dependency{{Job: "$1"}, {Job: "$2"}}},
	}})
	require.NoError(t, err)
	id := resp.GetResults()[0].GetId()

	got, err := b.client.GetWorkflow(ctx, &pulsev1.GetWorkflowRequest{Id: id})
	require.NoError(t, err)
	wf := got.GetWorkflow()
	require.Equal(t, pulsev1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, wf.GetStatus())
	require.Equal(t, "wf.a", wf.GetTopic())
	require.EqualValues(t, 4, wf.GetCounts().GetTotal())
	require.EqualValues(t, 3, wf.GetCounts().GetBlocked())

	list, err := b.client.ListWorkflows(ctx, &pulsev1.ListWorkflowsRequest{Status: pulsev1.WorkflowStatus_WORKFLOW_STATUS_RUNNING})
	require.NoError(t, err)
	require.Len(t, list.GetWorkflows(), 1)
	require.Equal(t, id, list.GetWorkflows()[0].GetId())
	require.Nil(t, list.GetWorkflows()[0].GetCounts(), "a listing carries no counts")
	require.Empty(t, list.GetNextPageToken())

	c, err := b.client.CancelWorkflow(ctx, &pulsev1.CancelWorkflowRequest{Id: id})
	require.NoError(t, err)
	require.EqualValues(t, 4, c.GetCanceled())
	require.Equal(t, pulsev1.WorkflowStatus_WORKFLOW_STATUS_CANCELED, c.GetWorkflow().GetStatus())
	require.Equal(t, pulsev1.JobStatus_JOB_STATUS_CANCELED, c.GetWorkflow().GetFailedStep().GetStatus())
	require.NotNil(t, c.GetWorkflow().GetFinishedAt())

	_, err = b.client.CancelWorkflow(ctx, &pulsev1.CancelWorkflowRequest{Id: id})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "nothing left to cancel: %v", err)

	r, err := b.client.RetryWorkflow(ctx, &pulsev1.RetryWorkflowRequest{Id: id})
	require.NoError(t, err)
	require.EqualValues(t, 4, r.GetRetried())
	require.Equal(t, pulsev1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, r.GetWorkflow().GetStatus())
	require.EqualValues(t, 3, r.GetWorkflow().GetCounts().GetBlocked(), "b, c and d wait for their parents again")

	// A job of a workflow that is not its first job, and no job at all.
	_, err = b.client.GetWorkflow(ctx, &pulsev1.GetWorkflowRequest{Id: resp.GetResults()[1].GetId()})
	require.Equal(t, codes.NotFound, status.Code(err))
	_, err = b.client.RetryWorkflow(ctx, &pulsev1.RetryWorkflowRequest{Id: "01936c4e-0000-7000-8000-000000000000"})
	require.Equal(t, codes.NotFound, status.Code(err))

	_, err = b.client.GetWorkflow(ctx, &pulsev1.GetWorkflowRequest{Id: "nope\x00"})
	requireInvalid(t, err, "id")
	_, err = b.client.CancelWorkflow(ctx, &pulsev1.CancelWorkflowRequest{})
	requireInvalid(t, err, "id")
	_, err = b.client.ListWorkflows(ctx, &pulsev1.ListWorkflowsRequest{Status: 99})
	requireInvalid(t, err, "status")
	_, err = b.client.ListWorkflows(ctx, &pulsev1.ListWorkflowsRequest{Limit: 501})
	requireInvalid(t, err, "limit")
	_, err = b.client.ListWorkflows(ctx, &pulsev1.ListWorkflowsRequest{Limit: -1})
	requireInvalid(t, err, "limit")
	_, err = b.client.ListWorkflows(ctx, &pulsev1.ListWorkflowsRequest{PageToken: "AAAA"})
	requireInvalid(t, err, "page_token")

	// Pages of one, newest first, to the end.
	for range 2 {
		_, err := b.client.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{Jobs: []*pulsev1.JobSpec{{Topic: "wf.x"}, {Topic: "wf.y", DependsOn: dep("$0")}}})
		require.NoError(t, err)
	}
	var seen []string
	tok := ""
	for {
		p, err := b.client.ListWorkflows(ctx, &pulsev1.ListWorkflowsRequest{Limit: 1, PageToken: tok})
		require.NoError(t, err)
		for _, w := range p.GetWorkflows() {
			seen = append(seen, w.GetTopic())
			require.NotNil(t, w.GetSubmittedAt())
		}
		if tok = p.GetNextPageToken(); tok == "" {
			break
		}
		require.Less(t, len(seen), 10)
	}
	require.Equal(t, []string{"wf.x", "wf.x", "wf.a"}, seen)
}

// A workflow's cancel and retry are logged with the operator who did
// them, the workflow and how many jobs they touched; a refused one logs
// nothing.
func TestWorkflowActionsAreLoggedWithTheActor(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})
	var buf syncBuffer
	svc := api.NewControlService(b.Store, b.Coalescer, api.Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	ctx := auth.WithIdentity(t.Context(), auth.Identity{Name: "alice", Role: auth.RoleOperator})
	resp, err := svc.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{Jobs: []*pulsev1.JobSpec{
		{Topic: "wf.log"}, {Topic: "wf.log", DependsOn: []*pulsev1.Dependency{{Job: "$0"}}},
	}})
	require.NoError(t, err)
	id := resp.GetResults()[0].GetId()
	_, err = svc.CancelWorkflow(ctx, &pulsev1.CancelWorkflowRequest{Id: id})
	require.NoError(t, err)
	_, err = svc.CancelWorkflow(ctx, &pulsev1.CancelWorkflowRequest{Id: id})
	require.Error(t, err)
	_, err = svc.RetryWorkflow(ctx, &pulsev1.RetryWorkflowRequest{Id: id})
	require.NoError(t, err)

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		lines = append(lines, m)
	}
	require.Len(t, lines, 2, buf.String())
	require.Equal(t, "workflow canceled", lines[0]["msg"])
	require.Equal(t, "workflow retried", lines[1]["msg"])
	for _, m := range lines {
		require.Equal(t, "alice", m["actor"])
		require.Equal(t, id, m["workflow_id"])
		require.InDelta(t, 2, m["jobs"], 0)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
