package api_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pglisten"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/api"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/pause"
)

// setupPaused is setup with the pause gate wired as the app wires it.
func setupPaused(t *testing.T) *testBundle {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	pool := pgtest.Pool(t)
	store := jobstore.New(pool)
	t.Cleanup(func() { _ = store.Close() }) // the read side (Cancel) opens a handle
	d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: 20 * time.Millisecond, Batch: 100}, store, nil, logger)
	gate := pause.NewGate()
	d.SetGate(gate)
	refresher := pause.NewRefresher(gate, store, pause.RefresherConfig{
		Interval: 10 * time.Millisecond,
		OnChange: d.JobsReady,
	}, logger)
	require.NoError(t, refresher.Prime(t.Context()))
	listener := pglisten.New(pglisten.FromPool(pool), logger)
	listener.Handle(jobstore.DispatchControlChannel, pglisten.Handler{Notify: func(string) { refresher.Kick() }, Resync: refresher.Kick})
	svc := api.NewDispatchService(api.Config{GatewayID: "gw-test", LeaseTTL: time.Minute, HeartbeatInterval: 20 * time.Second,
		Pause: gate}, store, d.Registry(), nil, logger)
	srv := grpcserver.New(grpcserver.Options{Logger: logger})
	pulsev1.RegisterDispatchServiceServer(srv.GRPC(), svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	loopsDone := make(chan struct{}, 2)
	go func() { d.Run(ctx); loopsDone <- struct{}{} }()
	go func() { refresher.Run(ctx); loopsDone <- struct{}{} }()
	require.NoError(t, listener.Start(ctx))
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
		_ = listener.Stop(context.Background())
		cancel()
		<-loopsDone
		<-loopsDone
	})
	return &testBundle{store: store, client: pulsev1.NewDispatchServiceClient(conn)}
}

func pauseScope(t *testing.T, store *jobstore.Store, scope string, mode jobstore.PauseMode) {
	t.Helper()
	_, err := store.Pause(t.Context(), jobstore.PauseRequest{Scope: scope, Mode: mode, Reason: "maintenance", Actor: "op"})
	require.NoError(t, err)
}

func resumeScope(t *testing.T, store *jobstore.Store, scope string) {
	t.Helper()
	_, err := store.Resume(t.Context(), scope, "op")
	require.NoError(t, err)
}

func recvState(t *testing.T, stream pulsev1.DispatchService_StreamJobsClient) *pulsev1.DispatchState {
	t.Helper()
	msg, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, msg.GetDispatchState(), "got %v", msg)
	return msg.GetDispatchState()
}

func mustUUID(t *testing.T, s string) uuid.UUID {
	t.Helper()
	id, err := uuid.Parse(s)
	require.NoError(t, err)
	return id
}

func pausedScopes(st *pulsev1.DispatchState) []string {
	var out []string
	for _, s := range st.GetPausedScopes() {
		out = append(out, s.GetScope())
	}
	return out
}

func TestStreamTellsPause(t *testing.T) {
	t.Parallel()

	t.Run("AnIdlePausedWorkerIsToldOncePerChangeThatMattersToIt", func(t *testing.T) {
		t.Parallel()
		b := setupPaused(t)
		pauseScope(t, b.store, jobstore.GlobalScope, jobstore.PauseDrain)
		insert(t, b.store, 2)
		// Whether the gate flips before or after the stream opens, the
		// worker is told (at open, or on the change), and the claim
		// statement takes nothing meanwhile.
		stream, _ := open(t, b, "w1", 2)

		st := recvState(t, stream)
		require.True(t, st.GetPaused())
		require.Equal(t, []string{"*"}, pausedScopes(st))
		require.Equal(t, "maintenance", st.GetPausedScopes()[0].GetReason())

		// A pause of a topic the worker does not take changes nothing it
		// needs to know; its own topic does.
		pauseScope(t, b.store, "elsewhere", jobstore.PauseDrain)
		pauseScope(t, b.store, "t", jobstore.PauseQuiesce)
		st = recvState(t, stream)
		for len(st.GetPausedScopes()) < 2 { // the two changes may arrive one by one
			st = recvState(t, stream)
		}
		require.Equal(t, []string{"*", "t"}, pausedScopes(st))

		resumeScope(t, b.store, "t")
		resumeScope(t, b.store, jobstore.GlobalScope)
		for st.GetPaused() || len(st.GetPausedScopes()) > 0 {
			st = recvState(t, stream)
		}
		// Resumed: the backlog comes through the ordinary claim.
		jobs := recvJobs(t, stream, 2)
		require.Len(t, jobs, 2)
	})

	t.Run("HeartbeatSaysQuiescedKeepsTheLeaseAndCarriesCancel", func(t *testing.T) {
		t.Parallel()
		b := setupPaused(t)
		insert(t, b.store, 2)
		stream, _ := open(t, b, "w1", 2)
		jobs := recvJobs(t, stream, 2)
		refs := []*pulsev1.JobRef{{JobId: jobs[0].GetJobId(), Attempt: 1}, {JobId: jobs[1].GetJobId(), Attempt: 1}}
		beat := func() *pulsev1.HeartbeatResponse {
			resp, err := b.client.Heartbeat(t.Context(), &pulsev1.HeartbeatRequest{WorkerId: "w1", Jobs: refs})
			require.NoError(t, err)
			require.Len(t, resp.GetResults(), 2)
			return resp
		}
		resp := beat()
		require.False(t, resp.GetResults()[0].GetQuiesced())
		require.Empty(t, resp.GetDispatchState().GetPausedScopes())

		pauseScope(t, b.store, "t", jobstore.PauseQuiesce)
		resp = beat()
		for _, r := range resp.GetResults() {
			require.True(t, r.GetQuiesced())
			require.True(t, r.GetLeaseHeld(), "a quiesced job's lease is still renewed")
		}
		require.Eventually(t, func() bool { return len(beat().GetDispatchState().GetPausedScopes()) == 1 }, 10*time.Second, time.Millisecond)

		_, err := b.store.Cancel(t.Context(), mustUUID(t, jobs[0].GetJobId()))
		require.NoError(t, err)
		resumeScope(t, b.store, "t")
		resp = beat()
		require.True(t, resp.GetResults()[0].GetCanceled())
		require.False(t, resp.GetResults()[1].GetQuiesced())
		require.True(t, resp.GetResults()[1].GetLeaseHeld())
	})
}
