package api_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// A worker id or topic Postgres cannot store would fail every claim of the
// gateway (one statement serves all its workers) and every report folded
// with it: such a stream is refused at open, and such a Heartbeat or
// ReportResult is refused, naming the field; the other workers keep
// getting jobs.
func TestUnstorableStreamParametersAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	good, err := b.client.StreamJobs(ctx)
	require.NoError(t, err)
	require.NoError(t, good.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Open{Open: &pulsev1.OpenStream{
		WorkerId: "good", Topics: []string{"t"}, Concurrency: 3}}}))
	msg, err := good.Recv()
	require.NoError(t, err)
	require.NotNil(t, msg.GetWelcome())
	// The handler registers the stream just after sending the welcome.
	require.Eventually(t, func() bool { workers, _ := b.registry.Stats(); return workers == 1 },
		10*time.Second, 5*time.Millisecond, "the good stream is registered")

	bad := map[string]*pulsev1.OpenStream{
		"open.worker_id": {WorkerId: "w\x00evil", Topics: []string{"t"}, Concurrency: 3},
		"open.topics[1]": {WorkerId: "w2", Topics: []string{"t", "t\x00"}, Concurrency: 3},
	}
	for field, o := range bad {
		stream, err := b.client.StreamJobs(ctx)
		require.NoError(t, err)
		if err := stream.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Open{Open: o}}); err != nil && !errors.Is(err, io.EOF) {
			require.NoError(t, err)
		}
		_, err = stream.Recv()
		require.Equal(t, codes.InvalidArgument, status.Code(err), field)
		require.Contains(t, status.Convert(err).Message(), field)
	}
	// Invalid UTF-8 cannot be sent by a Go client (protobuf refuses to
	// marshal it); the handler refuses it all the same.
	_, err = b.svc.Heartbeat(ctx, &pulsev1.HeartbeatRequest{WorkerId: "w\xff"})
	require.Equal(t, apierr.KindInvalidArgument, apierr.KindOf(err))
	require.Equal(t, "worker_id", apierr.FieldOf(err))

	// Each refused stream's handler returned before its refusal reached
	// the client, so none of them can still register.
	workers, _ := b.registry.Stats()
	require.Equal(t, 1, workers, "refused streams are not registered")

	insert(t, b.store, 3)
	got := map[string]bool{}
	for len(got) < 3 {
		msg, err := good.Recv()
		require.NoError(t, err, "the good worker keeps getting jobs")
		for _, a := range msg.GetAssignments().GetJobs() {
			got[a.GetJobId()] = true
		}
	}

	_, err = b.client.Heartbeat(ctx, &pulsev1.HeartbeatRequest{WorkerId: "good\x00"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "worker_id")
	_, err = b.client.ReportResult(ctx, &pulsev1.ReportResultRequest{WorkerId: "good\x00", Results: []*pulsev1.JobResult{
		{JobId: uuid.NewString(), Attempt: 1, Outcome: pulsev1.Outcome_OUTCOME_COMPLETE}}})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "worker_id")
	_, err = b.client.ReportResult(ctx, &pulsev1.ReportResultRequest{WorkerId: strings.Repeat("w", 201)})
	require.Equal(t, codes.InvalidArgument, status.Code(err))

	var running int
	require.NoError(t, b.store.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'RUNNING' AND locked_by = 'good'`).Scan(&running))
	require.Equal(t, 3, running)
}
