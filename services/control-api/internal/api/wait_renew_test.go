package api_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pglisten"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/waiter"
)

// countingStore counts the service's reads of one job.
type countingStore struct {
	*jobstore.Store
	gets atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, id uuid.UUID) (*jobstore.Job, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, id)
}

// A client that only waits for the finish (omit_unfinished_job, as the
// SDKs ask) renews its long-poll without a read: the first wait reads the
// job once, its renewals on the same process read nothing, and the
// settle's notification still ends the wait with the job as it finished.
// A wait that wants the unfinished job reads it when it times out.
func TestWaitRenewalsReadNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := apitest.New(t, apitest.Options{})
	store := &countingStore{Store: b.Store}
	hub := waiter.New(b.Store, waiter.Options{RecheckAfter: time.Hour})
	require.NoError(t, hub.Start(ctx))
	t.Cleanup(func() { _ = hub.Stop(context.Background()) })

	listening := make(chan struct{})
	var once atomic.Bool
	l := pglisten.New(func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.Connect(ctx, b.Pool.Config().ConnString())
	}, nil)
	l.Handle(jobstore.SettledChannel, pglisten.Handler{Notify: hub.Notify, Resync: func() {
		hub.Resync()
		if once.CompareAndSwap(false, true) {
			close(listening)
		}
	}})
	require.NoError(t, l.Start(ctx))
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	select {
	case <-listening:
	case <-time.After(proctest.Patience):
		t.Fatal("the listener never listened")
	}

	svc := api.NewControlService(store, b.Coalescer, api.Options{Waiters: hub})
	srv := grpcserver.New(grpcserver.Options{})
	pulsev1.RegisterControlServiceServer(srv.GRPC(), svc)
	client := pulsev1.NewControlServiceClient(apitest.Dial(t, srv))

	res, err := client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: spec("wait.renew")})
	require.NoError(t, err)
	id := res.GetResult().GetId()
	poll := func(omit bool, timeout time.Duration) *pulsev1.WaitJobResponse {
		resp, err := client.WaitJob(ctx, &pulsev1.WaitJobRequest{Id: id, Timeout: durationpb.New(timeout), OmitUnfinishedJob: omit})
		require.NoError(t, err)
		return resp
	}

	resp := poll(true, 20*time.Millisecond)
	require.False(t, resp.GetFinished())
	require.Nil(t, resp.GetJob(), "asked without the unfinished job")
	require.EqualValues(t, 1, store.gets.Load(), "the first wait reads the job once")
	for range 3 {
		require.False(t, poll(true, 20*time.Millisecond).GetFinished())
	}
	require.EqualValues(t, 1, store.gets.Load(), "renewals read nothing")

	resp = poll(false, 20*time.Millisecond)
	require.False(t, resp.GetFinished())
	require.Equal(t, id, resp.GetJob().GetId(), "without omit, the job as it is")
	require.EqualValues(t, 2, store.gets.Load(), "only the timeout's read")

	done := make(chan *pulsev1.WaitJobResponse, 1)
	go func() {
		resp, err := client.WaitJob(ctx, &pulsev1.WaitJobRequest{Id: id, Timeout: durationpb.New(time.Minute), OmitUnfinishedJob: true})
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	require.Eventually(t, func() bool { return hub.Waiters() == 1 }, proctest.Patience, 5*time.Millisecond)
	_, err = client.CancelJob(ctx, &pulsev1.CancelJobRequest{Id: id})
	require.NoError(t, err)
	select {
	case resp = <-done:
	case <-time.After(proctest.Patience):
		t.Fatal("the cancel's notification did not end the wait")
	}
	require.True(t, resp.GetFinished())
	require.Equal(t, pulsev1.JobStatus_JOB_STATUS_CANCELED, resp.GetJob().GetStatus())

	gets := store.gets.Load()
	require.True(t, poll(true, time.Minute).GetFinished(), "a finished job is read, not vouched for")
	require.Equal(t, gets+1, store.gets.Load())
}
