package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
)

// TestListJobsLeavesArgsOutUnlessAsked: gRPC ListJobs lists jobs without
// their args unless include_args; GetJob always has them.
func TestListJobsLeavesArgsOutUnlessAsked(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})
	ctx := t.Context()
	sub, err := b.Service.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: &pulsev1.JobSpec{Topic: "t", Args: []byte(`{"k":"v"}`)}})
	require.NoError(t, err)

	resp, err := b.Service.ListJobs(ctx, &pulsev1.ListJobsRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetJobs(), 1)
	require.Empty(t, resp.GetJobs()[0].GetArgs())
	require.Equal(t, "t", resp.GetJobs()[0].GetTopic())

	resp, err = b.Service.ListJobs(ctx, &pulsev1.ListJobsRequest{IncludeArgs: true})
	require.NoError(t, err)
	require.JSONEq(t, `{"k":"v"}`, string(resp.GetJobs()[0].GetArgs()))

	got, err := b.Service.GetJob(ctx, &pulsev1.GetJobRequest{Id: sub.GetResult().GetId()})
	require.NoError(t, err)
	require.JSONEq(t, `{"k":"v"}`, string(got.GetJob().GetArgs()))
}
