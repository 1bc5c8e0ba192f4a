package api_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// A worker's failure may ask for its next attempt's wait (retry_after):
// the job waits exactly that, instead of its backoff, the attempt counts,
// and the gateway counts the failure in job_throughput under its id.
func TestReportResultRetryAfter(t *testing.T) {
	t.Parallel()

	t.Run("TheJobWaitsWhatTheHandlerAsked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insert(t, b.store, 1)
		stream, _ := open(t, b, "w1", 1)
		a := recvJobs(t, stream, 1)[0]
		resp, err := b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{{
			JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_FAIL, Error: "rate limited",
			RetryAfter: durationpb.New(90 * time.Second),
		}}})
		require.NoError(t, err)
		require.EqualValues(t, codes.OK, resp.GetAcks()[0].GetCode())
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_RETRYING, resp.GetAcks()[0].GetStatus())

		// next_run_at less the failure's own timestamp (the same now()).
		var waitMicros int64
		var attempts int32
		require.NoError(t, b.store.Pool().QueryRow(t.Context(), `
			SELECT (extract(epoch FROM next_run_at - (errors->-1->>'at')::timestamptz) * 1000000)::bigint, attempts
			FROM jobs WHERE id = $1`, a.GetJobId()).Scan(&waitMicros, &attempts))
		require.Equal(t, 90*time.Second, time.Duration(waitMicros)*time.Microsecond)
		require.Equal(t, int32(1), attempts)

		var failed int64
		require.NoError(t, b.store.Pool().QueryRow(t.Context(),
			`SELECT failed FROM job_throughput WHERE topic = 't' AND writer = 'gw-test'`).Scan(&failed))
		require.Equal(t, int64(1), failed)
	})

	t.Run("RefusesABadRetryAfterNamingTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insert(t, b.store, 1)
		stream, _ := open(t, b, "w1", 1)
		a := recvJobs(t, stream, 1)[0]
		ok := &pulsev1.JobResult{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_FAIL, Error: "boom"}
		for _, bad := range []*pulsev1.JobResult{
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_FAIL, RetryAfter: durationpb.New(-time.Second)},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_FAIL, RetryAfter: &durationpb.Duration{}},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_FAIL, RetryAfter: durationpb.New(time.Microsecond)},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_FAIL, RetryAfter: durationpb.New(367 * 24 * time.Hour)},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_FAIL, RetryAfter: &durationpb.Duration{Seconds: 1 << 62}},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_COMPLETE, RetryAfter: durationpb.New(time.Second)},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_FAIL_PERMANENT, RetryAfter: durationpb.New(time.Second)},
		} {
			_, err := b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{ok, bad}})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", bad)
			require.Contains(t, status.Convert(err).Message(), "results[1].retry_after", "%v", bad)
		}
		// Nothing was settled, not even the good result sent with a bad one.
		var st string
		require.NoError(t, b.store.Pool().QueryRow(t.Context(), `SELECT status FROM jobs WHERE id = $1`, a.GetJobId()).Scan(&st))
		require.Equal(t, "RUNNING", st)
	})
}
