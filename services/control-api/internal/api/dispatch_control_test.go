package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
)

type dispatchBundle struct {
	*apitest.Bundle
	metrics *api.Metrics
	client  pulsev1.DispatchControlServiceClient
	now     time.Time
}

// setupDispatchControl serves DispatchControlService over loopback gRPC;
// the identity interceptor stands in for auth's, naming the caller "op-1".
func setupDispatchControl(t *testing.T) *dispatchBundle {
	t.Helper()
	b := &dispatchBundle{Bundle: apitest.New(t, apitest.Options{}), metrics: api.NewMetrics(prometheus.NewRegistry()), now: time.Now()}
	svc := api.NewDispatchControl(b.Store, api.DispatchOptions{Metrics: b.metrics, Now: func() time.Time { return b.now }})
	srv := grpcserver.New(grpcserver.Options{ExtraUnary: []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(auth.WithIdentity(ctx, auth.Identity{Name: "op-1", Role: auth.RoleOperator}), req)
		},
	}})
	pulsev1.RegisterDispatchControlServiceServer(srv.GRPC(), svc)
	conn := apitest.Dial(t, srv)
	b.client = pulsev1.NewDispatchControlServiceClient(conn)
	return b
}

func TestDispatchControl(t *testing.T) {
	t.Parallel()

	t.Run("PauseRecordsTheAuthenticatedActorAndCountsOnlyChanges", func(t *testing.T) {
		t.Parallel()
		b := setupDispatchControl(t)
		ctx := t.Context()
		req := &pulsev1.PauseDispatchRequest{Reason: "upgrade", Mode: pulsev1.PauseMode_PAUSE_MODE_QUIESCE, Topic: "mail",
			PauseFor: durationpb.New(30 * time.Minute)}
		resp, err := b.client.PauseDispatch(ctx, req)
		require.NoError(t, err)
		require.True(t, resp.GetChanged())
		require.Equal(t, "op-1", resp.GetState().GetActor())
		require.Equal(t, pulsev1.PauseMode_PAUSE_MODE_QUIESCE, resp.GetState().GetMode())
		require.WithinDuration(t, b.now.Add(30*time.Minute), resp.GetState().GetUntil().AsTime(), time.Millisecond)

		again, err := b.client.PauseDispatch(ctx, req)
		require.NoError(t, err)
		require.False(t, again.GetChanged(), "the same pause with the same expiry is idempotent")
		require.Equal(t, 1.0, testutil.ToFloat64(b.metrics.DispatchActions.WithLabelValues("pause")))
		require.Equal(t, 1.0, testutil.ToFloat64(b.metrics.DispatchPaused.WithLabelValues("mail")))

		res, err := b.client.ResumeDispatch(ctx, &pulsev1.ResumeDispatchRequest{Topic: "mail"})
		require.NoError(t, err)
		require.True(t, res.GetChanged())
		require.Equal(t, 0.0, testutil.ToFloat64(b.metrics.DispatchPaused.WithLabelValues("mail")))

		evs, err := b.client.ListDispatchEvents(ctx, &pulsev1.ListDispatchEventsRequest{})
		require.NoError(t, err)
		require.Len(t, evs.GetEvents(), 2)
		for _, e := range evs.GetEvents() {
			require.Equal(t, "op-1", e.GetActor())
			require.Equal(t, "mail", e.GetScope())
		}
		require.Equal(t, pulsev1.DispatchAction_DISPATCH_ACTION_RESUME, evs.GetEvents()[0].GetAction())
	})

	t.Run("InvalidArgumentNamesTheGRPCField", func(t *testing.T) {
		t.Parallel()
		b := setupDispatchControl(t)
		cases := map[string]*pulsev1.PauseDispatchRequest{
			"reason":    {},
			"mode":      {Reason: "x", Mode: 7},
			"pause_for": {Reason: "x", PauseFor: durationpb.New(-time.Second)},
			"until":     {Reason: "x", Until: timestamppb.New(b.now.Add(-time.Second))},
		}
		for field, req := range cases {
			_, err := b.client.PauseDispatch(t.Context(), req)
			require.Equal(t, codes.InvalidArgument, status.Code(err), field)
			require.Contains(t, status.Convert(err).Message(), field)
		}
	})
}
