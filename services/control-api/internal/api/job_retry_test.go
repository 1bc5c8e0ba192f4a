package api_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// Over gRPC, a job's retry policy is a RetryPolicy of Durations: stored
// and shown by GetJob, refused as InvalidArgument naming the member.
func TestSubmitRetryPolicyOverGRPC(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	d := durationpb.New

	for _, p := range []*pulsev1.RetryPolicy{
		{Base: d(2 * time.Second), Max: d(10 * time.Minute)},
		{Base: d(250 * time.Millisecond)},
		{Fixed: d(30 * time.Second)},
	} {
		s := spec("grpc.retry")
		s.Retry = p
		res, err := b.client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: s})
		require.NoError(t, err)
		got, err := b.client.GetJob(ctx, &pulsev1.GetJobRequest{Id: res.GetResult().GetId()})
		require.NoError(t, err)
		require.True(t, proto.Equal(p, got.GetJob().GetRetry()), "%v != %v", p, got.GetJob().GetRetry())
	}
	res, err := b.client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: spec("grpc.retry")})
	require.NoError(t, err)
	got, err := b.client.GetJob(ctx, &pulsev1.GetJobRequest{Id: res.GetResult().GetId()})
	require.NoError(t, err)
	require.Nil(t, got.GetJob().GetRetry(), "no policy of its own: the schema's")

	for field, bad := range map[string]*pulsev1.RetryPolicy{
		"job.retry":       {Base: d(time.Second), Fixed: d(time.Second)},
		"job.retry.max":   {Base: d(time.Minute), Max: d(time.Second)},
		"job.retry.base":  {Base: &durationpb.Duration{Seconds: -1}},
		"job.retry.fixed": {Fixed: &durationpb.Duration{Seconds: 1 << 50}},
	} {
		s := spec("grpc.retry")
		s.Retry = bad
		_, err := b.client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: s})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), field)
		// In a batch, the member is named by its index.
		_, err = b.client.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{Jobs: []*pulsev1.JobSpec{spec("grpc.retry"), s}})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "jobs[1]."+field[len("job."):])
	}
	require.Equal(t, 4, b.CountJobs(t))
}
