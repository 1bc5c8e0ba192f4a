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

// A snooze puts the job back to PENDING for retry_after without spending
// the attempt, and counts nothing in job_throughput; retry_after is
// required and bounded.
func TestReportResultSnooze(t *testing.T) {
	t.Parallel()

	t.Run("TheJobSleepsAndKeepsItsBudget", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insert(t, b.store, 1)
		stream, _ := open(t, b, "w1", 1)
		a := recvJobs(t, stream, 1)[0]
		resp, err := b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{{
			JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_SNOOZE,
			RetryAfter: durationpb.New(90 * time.Second),
		}}})
		require.NoError(t, err)
		require.EqualValues(t, codes.OK, resp.GetAcks()[0].GetCode(), resp.GetAcks()[0].GetMessage())
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_PENDING, resp.GetAcks()[0].GetStatus())

		var attempts, snoozes int32
		var errs int
		var ahead bool
		require.NoError(t, b.store.Pool().QueryRow(t.Context(), `
			SELECT attempts, snoozes, jsonb_array_length(errors), next_run_at > now() + interval '80 seconds'
			FROM jobs WHERE id = $1`, a.GetJobId()).Scan(&attempts, &snoozes, &errs, &ahead))
		require.Equal(t, int32(1), attempts)
		require.Equal(t, int32(1), snoozes)
		require.Zero(t, errs)
		require.True(t, ahead, "the job sleeps for what the handler asked")
		var counted int64
		require.NoError(t, b.store.Pool().QueryRow(t.Context(),
			`SELECT count(*) FROM job_throughput WHERE topic = 't'`).Scan(&counted))
		require.Zero(t, counted, "a snooze settled no attempt")
	})

	t.Run("RefusesABadSnoozeNamingTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insert(t, b.store, 1)
		stream, _ := open(t, b, "w1", 1)
		a := recvJobs(t, stream, 1)[0]
		ok := &pulsev1.JobResult{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_SNOOZE, RetryAfter: &durationpb.Duration{}}
		for _, bad := range []*pulsev1.JobResult{
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_SNOOZE},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_SNOOZE, RetryAfter: durationpb.New(-time.Second)},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_SNOOZE, RetryAfter: durationpb.New(time.Nanosecond)},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_SNOOZE, RetryAfter: durationpb.New(367 * 24 * time.Hour)},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_SNOOZE, RetryAfter: &durationpb.Duration{Seconds: 1 << 62}},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_SNOOZE, RetryAfter: &durationpb.Duration{Seconds: 1, Nanos: -1}},
		} {
			_, err := b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{ok, bad}})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", bad)
			require.Contains(t, status.Convert(err).Message(), "results[1].retry_after", "%v", bad)
		}
		var st string
		require.NoError(t, b.store.Pool().QueryRow(t.Context(), `SELECT status FROM jobs WHERE id = $1`, a.GetJobId()).Scan(&st))
		require.Equal(t, "RUNNING", st, "nothing was settled")

		// The good one alone: a zero snooze, claimable again at once.
		resp, err := b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{ok}})
		require.NoError(t, err)
		require.EqualValues(t, codes.OK, resp.GetAcks()[0].GetCode(), resp.GetAcks()[0].GetMessage())
		var due bool
		require.NoError(t, b.store.Pool().QueryRow(t.Context(),
			`SELECT status = 'PENDING' AND next_run_at <= now() FROM jobs WHERE id = $1`, a.GetJobId()).Scan(&due))
		require.True(t, due)
	})
}
