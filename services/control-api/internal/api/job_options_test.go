package api_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
)

// Over gRPC, timeout and unique_for are google.protobuf.Durations: stored
// and shown (timeout), answered as the first job (unique_for), refused as
// InvalidArgument naming the field when out of range.
func TestSubmitTimeoutAndUniqueForOverGRPC(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

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

// Over gRPC, a schedule definition without has_priority gets a job's
// default priority, 5; has_priority with 0 keeps 0.
func TestSchedulePriorityDefaultsLikeAJobOverGRPC(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := apitest.New(t, apitest.Options{})
	svc := api.NewSchedules(b.Store, nil, nil)

	sc, err := svc.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: &pulsev1.ScheduleDefinition{
		Name: "unset", Topic: "t", Kind: "every", Expression: "1h"}})
	require.NoError(t, err)
	require.EqualValues(t, 5, sc.GetDefinition().GetPriority())
	require.True(t, sc.GetDefinition().GetHasPriority())

	sc, err = svc.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: &pulsev1.ScheduleDefinition{
		Name: "zero", Topic: "t", Kind: "every", Expression: "1h", HasPriority: true}})
	require.NoError(t, err)
	require.EqualValues(t, 0, sc.GetDefinition().GetPriority())

	var stored int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT priority FROM schedules WHERE name = 'unset'`).Scan(&stored))
	require.Equal(t, 5, stored)
	// The column's own default agrees (migration 00008).
	require.NoError(t, b.Pool.QueryRow(ctx, `INSERT INTO schedules (id, name, topic, kind, expression, next_run_at)
		VALUES (gen_random_uuid(), 'by-hand', 't', 'every', '1h', now()) RETURNING priority`).Scan(&stored))
	require.Equal(t, 5, stored)
}
