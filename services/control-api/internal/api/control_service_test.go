package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"

	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
)

const maxArgsBytes = 1024

type testBundle struct {
	*apitest.Bundle
	client pulsev1.ControlServiceClient
}

// setup serves the real ControlService on a loopback gRPC server built as
// control-api builds it, on a fresh database.
func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupWith(t, apitest.Options{MaxArgsBytes: maxArgsBytes, MaxBatchJobs: 10})
}

// setupWith is setup with the bundle's options spelled out.
func setupWith(t testing.TB, opts apitest.Options) *testBundle {
	t.Helper()
	b := apitest.New(t, opts)
	srv := grpcserver.New(grpcserver.Options{})
	pulsev1.RegisterControlServiceServer(srv.GRPC(), b.Service)
	conn := apitest.Dial(t, srv)
	return &testBundle{Bundle: b, client: pulsev1.NewControlServiceClient(conn)}
}

func spec(topic string) *pulsev1.JobSpec {
	return &pulsev1.JobSpec{Topic: topic, Args: []byte(`{"to":"a@example.com"}`)}
}

// requireInvalid checks err is InvalidArgument and its message leads with
// the field, as apierr spells it.
func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "not a gRPC status: %v", err)
	require.Equal(t, codes.InvalidArgument, st.Code(), st.Message())
	require.True(t, strings.HasPrefix(st.Message(), field+":"), "message %q should name %s", st.Message(), field)
}

func TestControlService(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("SubmitGetListCancelRetryWalkAJobThroughItsLife", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		var ids []string
		for i := range 5 {
			s := spec("email.send")
			s.Priority, s.HasPriority = int32(i), true
			res, err := b.client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: s})
			require.NoError(t, err)
			require.False(t, res.GetResult().GetDuplicate())
			ids = append(ids, res.GetResult().GetId())
		}

		got, err := b.client.GetJob(ctx, &pulsev1.GetJobRequest{Id: ids[2]})
		require.NoError(t, err)
		job := got.GetJob()
		require.Equal(t, ids[2], job.GetId())
		require.Equal(t, "email.send", job.GetTopic())
		require.JSONEq(t, `{"to":"a@example.com"}`, string(job.GetArgs()))
		require.EqualValues(t, 2, job.GetPriority())
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_PENDING, job.GetStatus())
		require.EqualValues(t, 25, job.GetMaxAttempts(), "the server default")
		require.NotNil(t, job.GetSubmittedAt())
		require.Nil(t, job.GetFinishedAt())

		// Pages of two, newest first, until the token runs out.
		var listed []string
		token := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 3, "5 jobs fit in 3 pages of 2")
			resp, err := b.client.ListJobs(ctx, &pulsev1.ListJobsRequest{Topic: "email.send", Limit: 2, PageToken: token})
			require.NoError(t, err)
			for _, j := range resp.GetJobs() {
				listed = append(listed, j.GetId())
			}
			token = resp.GetNextPageToken()
			if token == "" {
				require.Len(t, resp.GetJobs(), 1, "the last page holds the remainder")
				break
			}
			require.Len(t, resp.GetJobs(), 2)
		}
		require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, listed)

		canceled, err := b.client.CancelJob(ctx, &pulsev1.CancelJobRequest{Id: ids[0]})
		require.NoError(t, err)
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_CANCELED, canceled.GetJob().GetStatus())
		require.NotNil(t, canceled.GetJob().GetFinishedAt())

		byStatus, err := b.client.ListJobs(ctx, &pulsev1.ListJobsRequest{Status: pulsev1.JobStatus_JOB_STATUS_CANCELED})
		require.NoError(t, err)
		require.Len(t, byStatus.GetJobs(), 1)
		require.Equal(t, ids[0], byStatus.GetJobs()[0].GetId())
		require.Empty(t, byStatus.GetNextPageToken())

		retried, err := b.client.RetryJob(ctx, &pulsev1.RetryJobRequest{Id: ids[0]})
		require.NoError(t, err)
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_PENDING, retried.GetJob().GetStatus())
		require.Nil(t, retried.GetJob().GetFinishedAt())

		_, err = b.client.RetryJob(ctx, &pulsev1.RetryJobRequest{Id: ids[1]})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "a PENDING job cannot be retried: %v", err)
		_, err = b.client.CancelJob(ctx, &pulsev1.CancelJobRequest{Id: ids[0]})
		require.NoError(t, err, "the retried job is live again, so it can be canceled")
	})

	t.Run("UnknownIDsAreNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const unknown = "01890a5d-ac96-774b-bcce-b302099a8057"
		_, err := b.client.GetJob(ctx, &pulsev1.GetJobRequest{Id: unknown})
		require.Equal(t, codes.NotFound, status.Code(err))
		_, err = b.client.CancelJob(ctx, &pulsev1.CancelJobRequest{Id: unknown})
		require.Equal(t, codes.NotFound, status.Code(err))
		_, err = b.client.RetryJob(ctx, &pulsev1.RetryJobRequest{Id: unknown})
		require.Equal(t, codes.NotFound, status.Code(err))
	})

	t.Run("BadInputIsRefusedNamingTheFieldAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: spec("seed")})
		require.NoError(t, err)
		before := b.CountJobs(t)

		with := func(f func(s *pulsev1.JobSpec)) *pulsev1.SubmitJobRequest {
			s := spec("email.send")
			f(s)
			return &pulsev1.SubmitJobRequest{Job: s}
		}
		submits := []struct {
			name  string
			req   *pulsev1.SubmitJobRequest
			field string
		}{
			{"TopicWithASpace", with(func(s *pulsev1.JobSpec) { s.Topic = "has space" }), "job.topic"},
			{"MissingTopic", with(func(s *pulsev1.JobSpec) { s.Topic = "" }), "job.topic"},
			{"ArgsNotJSON", with(func(s *pulsev1.JobSpec) { s.Args = []byte(`not json`) }), "job.args"},
			{"ArgsAJSONArray", with(func(s *pulsev1.JobSpec) { s.Args = []byte(`[1,2]`) }), "job.args"},
			{"ArgsOverTheLimit", with(func(s *pulsev1.JobSpec) {
				s.Args = []byte(`{"pad":"` + strings.Repeat("x", maxArgsBytes) + `"}`)
			}), "job.args"},
			{"PriorityEleven", with(func(s *pulsev1.JobSpec) { s.Priority, s.HasPriority = 11, true }), "job.priority"},
			{"PriorityNegative", with(func(s *pulsev1.JobSpec) { s.Priority, s.HasPriority = -1, true }), "job.priority"},
			{"MaxAttemptsOverOneHundred", with(func(s *pulsev1.JobSpec) { s.MaxAttempts = 101 }), "job.max_attempts"},
			{"NoSpecAtAll", &pulsev1.SubmitJobRequest{}, "job"},
		}
		for _, tc := range submits {
			_, err := b.client.SubmitJob(ctx, tc.req)
			requireInvalid(t, err, tc.field)
			require.Equal(t, before, b.CountJobs(t), tc.name)
		}

		_, err = b.client.GetJob(ctx, &pulsev1.GetJobRequest{Id: "not-a-uuid"})
		requireInvalid(t, err, "id")
		_, err = b.client.CancelJob(ctx, &pulsev1.CancelJobRequest{Id: ""})
		requireInvalid(t, err, "id")
		_, err = b.client.ListJobs(ctx, &pulsev1.ListJobsRequest{Limit: 501})
		requireInvalid(t, err, "limit")
		_, err = b.client.ListJobs(ctx, &pulsev1.ListJobsRequest{Limit: -1})
		requireInvalid(t, err, "limit")
		_, err = b.client.ListJobs(ctx, &pulsev1.ListJobsRequest{PageToken: "!!"})
		requireInvalid(t, err, "page_token")
		_, err = b.client.ListJobs(ctx, &pulsev1.ListJobsRequest{Topic: "has space"})
		requireInvalid(t, err, "topic")
		_, err = b.client.ListJobs(ctx, &pulsev1.ListJobsRequest{Status: 42})
		requireInvalid(t, err, "status")
		require.Equal(t, before, b.CountJobs(t))
	})

	t.Run("ABatchWithOneBadSpecWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.client.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{Jobs: []*pulsev1.JobSpec{
			spec("ok.one"), spec("bad topic"), spec("ok.two"),
		}})
		requireInvalid(t, err, "jobs[1].topic")
		require.Zero(t, b.CountJobs(t))

		_, err = b.client.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{})
		requireInvalid(t, err, "jobs")
		tooMany := make([]*pulsev1.JobSpec, 11)
		for i := range tooMany {
			tooMany[i] = spec("ok")
		}
		_, err = b.client.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{Jobs: tooMany})
		requireInvalid(t, err, "jobs")
		require.Zero(t, b.CountJobs(t))
	})

	t.Run("ABatchEnqueuesEverySpecInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		specs := make([]*pulsev1.JobSpec, 5)
		for i := range specs {
			specs[i] = spec(fmt.Sprintf("batch.%d", i))
		}
		specs[4].IdempotencyKey = "same"
		specs[3].IdempotencyKey = "same"
		resp, err := b.client.SubmitJobs(ctx, &pulsev1.SubmitJobsRequest{Jobs: specs})
		require.NoError(t, err)
		require.Len(t, resp.GetResults(), 5)
		for i, r := range resp.GetResults()[:4] {
			got, err := b.client.GetJob(ctx, &pulsev1.GetJobRequest{Id: r.GetId()})
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("batch.%d", i), got.GetJob().GetTopic())
		}
		require.Equal(t, resp.GetResults()[3].GetId(), resp.GetResults()[4].GetId(), "a key repeated in one batch is one job")
		require.True(t, resp.GetResults()[4].GetDuplicate())
		require.Equal(t, 4, b.CountJobs(t))
	})

	t.Run("AnIdempotentResubmitReturnsTheSameJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := spec("email.send")
		s.IdempotencyKey = "order-42"
		first, err := b.client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: s})
		require.NoError(t, err)
		again, err := b.client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: s})
		require.NoError(t, err)
		require.Equal(t, first.GetResult().GetId(), again.GetResult().GetId())
		require.False(t, first.GetResult().GetDuplicate())
		require.True(t, again.GetResult().GetDuplicate())
		require.Equal(t, 1, b.CountJobs(t))
	})

	t.Run("TheCallersTraceContextIsStoredOnTheJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		mctx := metadata.AppendToOutgoingContext(ctx, "traceparent", tp, "tracestate", "vendor=x")
		res, err := b.client.SubmitJob(mctx, &pulsev1.SubmitJobRequest{Job: spec("traced")})
		require.NoError(t, err)
		got, err := b.client.GetJob(ctx, &pulsev1.GetJobRequest{Id: res.GetResult().GetId()})
		require.NoError(t, err)
		require.Equal(t, tp, got.GetJob().GetTraceparent())
		require.Equal(t, "vendor=x", got.GetJob().GetTracestate())
	})

	t.Run("BigIntegerArgsSurviveUnchanged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		args := `{"n": 12345678901234567890}`
		res, err := b.client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: &pulsev1.JobSpec{Topic: "big", Args: []byte(args)}})
		require.NoError(t, err)
		got, err := b.client.GetJob(ctx, &pulsev1.GetJobRequest{Id: res.GetResult().GetId()})
		require.NoError(t, err)
		require.Equal(t, args, string(got.GetJob().GetArgs()))
	})
}
