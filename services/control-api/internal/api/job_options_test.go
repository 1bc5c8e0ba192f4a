package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// Over gRPC, timeout and unique_for are google.protobuf.Durations: stored
// and shown (timeout), answered as the first job (unique_for), refused as
// InvalidArgument naming the field when out of range.
func TestSubmitTimeoutAndUniqueForOverGRPC(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	s := spec("grpc.opts")
	s.Timeout, s.UniqueFor = durationpb.New(45*time.Second), durationpb.New(time.Hour)
	first, err := b.client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: s})
	require.NoError(t, err)
	require.False(t, first.GetResult().GetDuplicate())
	got, err := b.client.GetJob(ctx, &pulsev1.GetJobRequest{Id: first.GetResult().GetId()})
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, got.GetJob().GetTimeout().AsDuration())

	again, err := b.client.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{Jobs: []*pulsev1.JobSpec{s, spec("grpc.opts")}})
	require.NoError(t, err)
	require.Equal(t, first.GetResult().GetId(), again.GetResults()[0].GetId())
	require.True(t, again.GetResults()[0].GetDuplicate())
	require.False(t, again.GetResults()[1].GetDuplicate())
	plain, err := b.client.GetJob(ctx, &pulsev1.GetJobRequest{Id: again.GetResults()[1].GetId()})
	require.NoError(t, err)
	require.Nil(t, plain.GetJob().GetTimeout())

	for field, bad := range map[string]*pulsev1.JobSpec{
		"job.timeout":    {Topic: "grpc.opts", Timeout: &durationpb.Duration{Seconds: -1}},
		"job.unique_for": {Topic: "grpc.opts", UniqueFor: &durationpb.Duration{Seconds: 1 << 50}},
	} {
		_, err := b.client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: bad})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), field)
	}
	require.Equal(t, 2, b.CountJobs(t))
}
