package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/api"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

type testBundle struct {
	store  *jobstore.Store
	client pulsev1.DispatchServiceClient
	// svc is the service behind client, for calls the Go client cannot
	// make (invalid UTF-8 in a string field) and for fuzz targets.
	svc      *api.DispatchService
	registry *dispatch.Registry
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := jobstore.New(pgtest.Pool(t), jobstore.ThroughputWriter("gw-test")) // as the app builds it
	t.Cleanup(func() { _ = store.Close() })                                     // the read side (Cancel) opens a handle
	d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: 20 * time.Millisecond, Batch: 100}, store, nil, logger)
	svc := api.NewDispatchService(api.Config{GatewayID: "gw-test", LeaseTTL: time.Minute, HeartbeatInterval: 20 * time.Second},
		store, d.Registry(), nil, logger)
	srv := grpcserver.New(grpcserver.Options{Logger: logger})
	pulsev1.RegisterDispatchServiceServer(srv.GRPC(), svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() { d.Run(ctx); close(loopDone) }()
	serveDone := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(serveDone) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		svc.Shutdown()
		stopCtx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = srv.Stop(stopCtx)
		<-serveDone
		cancel()
		<-loopDone
	})
	return &testBundle{store: store, client: pulsev1.NewDispatchServiceClient(conn), svc: svc, registry: d.Registry()}
}

func insert(t *testing.T, store *jobstore.Store, n int) {
	t.Helper()
	jobs := make([]pulsetype.NewJob, n)
	for i := range jobs {
		jobs[i] = pulsetype.NewJob{ID: uuid.Must(uuid.NewV7()), Topic: "t", Args: []byte(`{"i":1}`), Priority: 5, MaxAttempts: 3}
	}
	_, err := store.Insert(t.Context(), jobs)
	require.NoError(t, err)
}

func open(t *testing.T, b *testBundle, worker string, concurrency int32) (pulsev1.DispatchService_StreamJobsClient, *pulsev1.Welcome) {
	t.Helper()
	stream, err := b.client.StreamJobs(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Open{Open: &pulsev1.OpenStream{
		WorkerId: worker, Topics: []string{"t"}, Concurrency: concurrency}}}))
	msg, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, msg.GetWelcome())
	return stream, msg.GetWelcome()
}

func recvJobs(t *testing.T, stream pulsev1.DispatchService_StreamJobsClient, n int) []*pulsev1.Assignment {
	t.Helper()
	var got []*pulsev1.Assignment
	for len(got) < n {
		msg, err := stream.Recv()
		require.NoError(t, err)
		got = append(got, msg.GetAssignments().GetJobs()...)
	}
	require.Len(t, got, n, "received more assignments than free slots")
	return got
}

func TestStreamJobs(t *testing.T) {
	t.Parallel()

	t.Run("WelcomesWithTheLeaseTermsAndSendsOnlyFreeSlotsWorth", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insert(t, b.store, 5)
		stream, welcome := open(t, b, "w1", 2)
		require.Equal(t, time.Minute, welcome.GetLeaseTtl().AsDuration())
		require.Equal(t, 20*time.Second, welcome.GetHeartbeatInterval().AsDuration())
		first := recvJobs(t, stream, 2)
		for _, a := range first {
			require.EqualValues(t, 1, a.GetAttempt())
			require.JSONEq(t, `{"i":1}`, string(a.GetArgs()))
		}
		// Nothing more arrives until a slot is credited back.
		require.NoError(t, stream.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Credit{Credit: &pulsev1.Credit{Slots: 1}}}))
		third := recvJobs(t, stream, 1)
		require.NotContains(t, []string{first[0].GetJobId(), first[1].GetJobId()}, third[0].GetJobId())

		var running int
		require.NoError(t, b.store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE status = 'RUNNING' AND locked_by = 'w1'`).Scan(&running))
		require.Equal(t, 3, running)
	})

	t.Run("AHalfCloseEndsTheStreamAfterSendingEveryJobClaimedForIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insert(t, b.store, 200)
		// The open frees slots, which wakes the dispatcher; the half-close
		// races its claim. Whatever the claim took must reach the worker
		// before the stream ends: no lease is left to lapse.
		for round := range 20 {
			worker := fmt.Sprintf("half-close-%d", round)
			stream, _ := open(t, b, worker, 5)
			require.NoError(t, stream.CloseSend())
			received := map[string]bool{}
			for {
				msg, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err, "the stream ends cleanly")
				for _, a := range msg.GetAssignments().GetJobs() {
					received[a.GetJobId()] = true
				}
			}
			rows, err := b.store.Pool().Query(t.Context(), `SELECT id::text FROM jobs WHERE status = 'RUNNING' AND locked_by = $1`, worker)
			require.NoError(t, err)
			claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Len(t, claimed, len(received), "round %d: every job claimed for the worker was sent to it", round)
			for _, id := range claimed {
				require.True(t, received[id], "round %d: job %s was claimed for the worker but never sent", round, id)
			}
		}
	})

	t.Run("RejectsABadOpen", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cases := map[string]*pulsev1.StreamJobsRequest{
			"open.topics[0]":   {Msg: &pulsev1.StreamJobsRequest_Open{Open: &pulsev1.OpenStream{WorkerId: "w", Topics: []string{"bad topic"}, Concurrency: 1}}},
			"open.concurrency": {Msg: &pulsev1.StreamJobsRequest_Open{Open: &pulsev1.OpenStream{WorkerId: "w", Topics: []string{"t"}}}},
			"open.worker_id":   {Msg: &pulsev1.StreamJobsRequest_Open{Open: &pulsev1.OpenStream{Topics: []string{"t"}, Concurrency: 1}}},
			"open":             {Msg: &pulsev1.StreamJobsRequest_Credit{Credit: &pulsev1.Credit{Slots: 1}}},
		}
		for field, req := range cases {
			stream, err := b.client.StreamJobs(t.Context())
			require.NoError(t, err)
			if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
				require.NoError(t, err)
			}
			_, err = stream.Recv()
			require.Equal(t, codes.InvalidArgument, status.Code(err), field)
			require.Contains(t, status.Convert(err).Message(), field)
		}
	})
}

func TestHeartbeatAndReport(t *testing.T) {
	t.Parallel()

	t.Run("FencesStaleAttemptsPerItem", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insert(t, b.store, 1)
		stream, _ := open(t, b, "w1", 1)
		a := recvJobs(t, stream, 1)[0]

		hb, err := b.client.Heartbeat(t.Context(), &pulsev1.HeartbeatRequest{WorkerId: "w1", Jobs: []*pulsev1.JobRef{
			{JobId: a.GetJobId(), Attempt: a.GetAttempt()},
			{JobId: a.GetJobId(), Attempt: a.GetAttempt() + 1},
		}})
		require.NoError(t, err)
		require.True(t, hb.GetResults()[0].GetLeaseHeld())
		require.False(t, hb.GetResults()[1].GetLeaseHeld())

		done := &pulsev1.JobResult{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_COMPLETE}
		resp, err := b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{done}})
		require.NoError(t, err)
		require.EqualValues(t, codes.OK, resp.GetAcks()[0].GetCode())
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_COMPLETED, resp.GetAcks()[0].GetStatus())

		resp, err = b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{done}})
		require.NoError(t, err)
		require.EqualValues(t, codes.FailedPrecondition, resp.GetAcks()[0].GetCode())
		require.Contains(t, resp.GetAcks()[0].GetMessage(), "COMPLETED")
	})

	t.Run("RejectsBadInputNamingTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.client.Heartbeat(t.Context(), &pulsev1.HeartbeatRequest{WorkerId: "w", Jobs: []*pulsev1.JobRef{{JobId: "nope", Attempt: 1}}})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "jobs[0].job_id")
		_, err = b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w", Results: []*pulsev1.JobResult{{JobId: uuid.NewString(), Attempt: 1}}})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "results[0].outcome")
		_, err = b.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{Results: []*pulsev1.JobResult{}})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "worker_id")
	})
}
