package grpcserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// probe is a hand-written service whose handlers fail the way the request
// says, so the tests need no generated code.
type probe struct{}

func (probe) fail(kind string) error {
	switch kind {
	case "invalid":
		return apierr.Invalid("topic", "must match [a-z0-9._-]{1,128}")
	case "notfound":
		return apierr.NotFound("job", "j1")
	case "transition":
		return fmt.Errorf("complete: %w", apierr.InvalidTransition("job is not running"))
	case "plain":
		return errors.New("disk on fire")
	case "panic":
		panic("handler bug")
	}
	return nil
}

const probeService = "pulse.test.Probe"

var probeDesc = grpc.ServiceDesc{
	ServiceName: probeService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Fail",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(_ context.Context, req any) (any, error) {
				return &wrapperspb.StringValue{Value: "ok"}, srv.(probe).fail(req.(*wrapperspb.StringValue).GetValue())
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + probeService + "/Fail"}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "FailStream",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			return srv.(probe).fail(in.GetValue())
		},
	}},
}

type testBundle struct {
	server *grpcserver.Server
	conn   *grpc.ClientConn
	logs   *syncBuffer
	reg    *prometheus.Registry
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	s := grpcserver.New(grpcserver.Options{
		Logger:  slog.New(slog.NewJSONHandler(logs, nil)),
		Metrics: metrics.GRPCServerMetrics(reg),
	})
	s.GRPC().RegisterService(&probeDesc, probe{})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, conn.Close())
		_ = s.Stop(context.Background())
		require.NoError(t, <-served)
	})
	return &testBundle{server: s, conn: conn, logs: logs, reg: reg}
}

func (b *testBundle) callFail(t *testing.T, kind string) error {
	t.Helper()
	return b.conn.Invoke(t.Context(), "/"+probeService+"/Fail",
		wrapperspb.String(kind), new(wrapperspb.StringValue))
}

func (b *testBundle) streamFail(t *testing.T, kind string) error {
	t.Helper()
	desc := &grpc.StreamDesc{ServerStreams: true}
	cs, err := b.conn.NewStream(t.Context(), desc, "/"+probeService+"/FailStream")
	require.NoError(t, err)
	require.NoError(t, cs.SendMsg(wrapperspb.String(kind)))
	require.NoError(t, cs.CloseSend())
	return cs.RecvMsg(new(wrapperspb.StringValue))
}

func TestServer(t *testing.T) {
	t.Parallel()

	t.Run("MapsTypedErrorsToStatusCodes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for kind, want := range map[string]codes.Code{
			"invalid":    codes.InvalidArgument,
			"notfound":   codes.NotFound,
			"transition": codes.FailedPrecondition,
			"plain":      codes.Internal,
		} {
			require.Equal(t, want, status.Code(b.callFail(t, kind)), "unary %s", kind)
			require.Equal(t, want, status.Code(b.streamFail(t, kind)), "stream %s", kind)
		}
	})

	t.Run("KeepsTheFieldInTheInvalidArgumentMessage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st := status.Convert(b.callFail(t, "invalid"))
		require.Equal(t, "topic: must match [a-z0-9._-]{1,128}", st.Message())
	})

	t.Run("TurnsAPanicIntoInternalAndLogsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, codes.Internal, status.Code(b.callFail(t, "panic")))
		require.Equal(t, codes.Internal, status.Code(b.streamFail(t, "panic")))
		require.Contains(t, b.logs.String(), `"panic":"handler bug"`)

		// The server survives to answer the next call.
		require.NoError(t, b.callFail(t, "none"))
	})

	t.Run("RecordsServerMetrics", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Error(t, b.callFail(t, "notfound"))

		mfs, err := b.reg.Gather()
		require.NoError(t, err)
		found := false
		for _, mf := range mfs {
			if mf.GetName() != "grpc_server_handled_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["grpc_method"] == "Fail" && labels["grpc_code"] == "NotFound" {
					found = m.GetCounter().GetValue() == 1
				}
			}
		}
		require.True(t, found, "grpc_server_handled_total{grpc_method=Fail,grpc_code=NotFound} == 1")
	})

	t.Run("RegistersReflection", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Contains(t, b.server.GRPC().GetServiceInfo(), "grpc.reflection.v1.ServerReflection")
	})

	t.Run("ReportsServingThenNotServingOnceStopBegins", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		hc := healthpb.NewHealthClient(b.conn)

		resp, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: probeService})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())

		watchCtx, cancelWatch := context.WithCancel(t.Context())
		watch, err := hc.Watch(watchCtx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		first, err := watch.Recv()
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.GetStatus())

		// The open watch keeps GracefulStop waiting, so Stop is observable
		// in progress.
		stopped := make(chan error, 1)
		go func() { stopped <- b.server.Stop(context.Background()) }()

		next, err := watch.Recv()
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.GetStatus())

		cancelWatch()
		require.NoError(t, <-stopped)
	})

	t.Run("ForcesStopWhenTheContextEnds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		watch, err := healthpb.NewHealthClient(b.conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, err = watch.Recv()
		require.NoError(t, err)

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.ErrorIs(t, b.server.Stop(ctx), context.Canceled)

		// The watch may first see the NOT_SERVING update; then the forced
		// stop cuts the stream.
		for err == nil {
			_, err = watch.Recv()
		}
		require.Equal(t, codes.Unavailable, status.Code(err))
	})
}
