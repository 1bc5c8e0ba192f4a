package api_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// A completion's result is stored as sent; what is not a completion's
// JSON result is refused naming the field, and nothing in the batch is
// settled; a result larger than the gateway stores dead-letters the job
// with an error saying so, instead of leaving it to run again.
func TestReportResultStoresTheResult(t *testing.T) {
	t.Parallel()

	t.Run("StoredWithTheCompletion", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insert(t, b.store, 1)
		stream, _ := open(t, b, "w1", 1)
		a := recvJobs(t, stream, 1)[0]
		result := []byte(`{"sum": 3, "items": ["a", "b"]}`)
		resp, err := b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{{
			JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_COMPLETE, Result: result,
		}}})
		require.NoError(t, err)
		require.EqualValues(t, codes.OK, resp.GetAcks()[0].GetCode())
		job, err := b.store.Get(t.Context(), uuid.MustParse(a.GetJobId()))
		require.NoError(t, err)
		require.Equal(t, string(result), string(job.Result))
	})

	t.Run("RefusesWhatIsNotACompletionsJSONNamingTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insert(t, b.store, 1)
		stream, _ := open(t, b, "w1", 1)
		a := recvJobs(t, stream, 1)[0]
		for _, bad := range []*pulsev1.JobResult{
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_FAIL, Error: "e", Result: []byte(`1`)},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_FAIL_PERMANENT, Error: "e", Result: []byte(`1`)},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_COMPLETE, Result: []byte(`{"a":`)},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_COMPLETE, Result: []byte("\"\xff\"")},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_COMPLETE, Result: []byte("\x00")},
		} {
			_, err := b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{bad}})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", bad)
			require.Contains(t, status.Convert(err).Message(), "results[0].result")
		}
		job, err := b.store.Get(t.Context(), uuid.MustParse(a.GetJobId()))
		require.NoError(t, err)
		require.Equal(t, pulsetype.StatusRunning, job.Status, "a refused report settles nothing")
	})

	t.Run("TooLargeDeadLettersTheJobSayingWhy", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insert(t, b.store, 1)
		stream, _ := open(t, b, "w1", 1)
		a := recvJobs(t, stream, 1)[0]
		big := []byte(`"` + strings.Repeat("x", pulsetype.DefaultMaxResultBytes) + `"`)
		resp, err := b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{{
			JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_COMPLETE, Result: big,
		}}})
		require.NoError(t, err)
		require.EqualValues(t, codes.OK, resp.GetAcks()[0].GetCode())
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_DEAD_LETTERED, resp.GetAcks()[0].GetStatus())
		job, err := b.store.Get(t.Context(), uuid.MustParse(a.GetJobId()))
		require.NoError(t, err)
		require.Nil(t, job.Result)
		require.Contains(t, job.Errors[len(job.Errors)-1].Error, "PULSE_MAX_RESULT_BYTES")
	})
}
