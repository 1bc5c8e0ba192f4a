package api_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// The lease holder's progress and metadata are stored; another worker's
// are not (held=false); what is not a progress or a JSON object is
// refused naming the field.
func TestUpdateProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insert(t, b.store, 1)
	stream, _ := open(t, b, "w1", 1)
	a := recvJobs(t, stream, 1)[0]

	resp, err := b.client.UpdateProgress(t.Context(), &pulsev1.UpdateProgressRequest{
		WorkerId: "w1", JobId: a.GetJobId(), Attempt: a.GetAttempt(), Progress: proto.Int32(30), Metadata: []byte(`{"stage": "upload"}`)})
	require.NoError(t, err)
	require.True(t, resp.GetHeld())
	resp, err = b.client.UpdateProgress(t.Context(), &pulsev1.UpdateProgressRequest{
		WorkerId: "w2", JobId: a.GetJobId(), Attempt: a.GetAttempt(), Progress: proto.Int32(99)})
	require.NoError(t, err)
	require.False(t, resp.GetHeld(), "another worker holds no lease on it")

	job, err := b.store.Get(t.Context(), uuid.MustParse(a.GetJobId()))
	require.NoError(t, err)
	require.Equal(t, 30, job.Progress)
	require.JSONEq(t, `{"stage": "upload"}`, string(job.Metadata))

	for field, bad := range map[string]*pulsev1.UpdateProgressRequest{
		"progress":  {WorkerId: "w1", JobId: a.GetJobId(), Attempt: a.GetAttempt(), Progress: proto.Int32(101)},
		"metadata":  {WorkerId: "w1", JobId: a.GetJobId(), Attempt: a.GetAttempt(), Metadata: []byte(`[1]`)},
		"job_id":    {WorkerId: "w1", JobId: "nope", Attempt: 1, Progress: proto.Int32(1)},
		"attempt":   {WorkerId: "w1", JobId: a.GetJobId(), Attempt: 0, Progress: proto.Int32(1)},
		"worker_id": {JobId: a.GetJobId(), Attempt: 1, Progress: proto.Int32(1)},
	} {
		_, err := b.client.UpdateProgress(t.Context(), bad)
		require.Equal(t, codes.InvalidArgument, status.Code(err), field)
		require.Contains(t, status.Convert(err).Message(), field)
	}
	for _, m := range [][]byte{[]byte(`{"a": "\u0000"}`), []byte(`{"a":`), []byte(`{"a": "` + strings.Repeat("x", pulsetype.MaxMetadataPatchBytes) + `"}`)} {
		_, err := b.client.UpdateProgress(t.Context(), &pulsev1.UpdateProgressRequest{WorkerId: "w1", JobId: a.GetJobId(), Attempt: a.GetAttempt(), Metadata: m})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
	}
	_, err = b.client.UpdateProgress(t.Context(), &pulsev1.UpdateProgressRequest{WorkerId: "w1", JobId: a.GetJobId(), Attempt: a.GetAttempt()})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "nothing to record")
}
