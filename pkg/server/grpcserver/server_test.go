package grpcserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// probe is a hand-written service whose handlers fail the way the request
// says, so the tests need no generated code.
type probe struct {
	// waiting receives a value when a "wait" call's handler runs.
	waiting chan struct{}
}

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
	case "unavailable":
		return apierr.Unavailable("submit", errors.New("failed to connect to `user=pulse database=pulsedb host=db.internal`"))
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
			h := func(ctx context.Context, req any) (any, error) {
				if req.(*wrapperspb.StringValue).GetValue() == "wait" {
					srv.(probe).waiting <- struct{}{}
					<-ctx.Done()
					return nil, ctx.Err()
				}
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
	logs   *proctest.Buffer
	reg    *prometheus.Registry
	// waiting receives a value when a "wait" call's handler runs.
	waiting chan struct{}
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupWith(t, grpcserver.Options{})
}

func setupWith(t *testing.T, opts grpcserver.Options) *testBundle {
	t.Helper()
	logs := &proctest.Buffer{}
	reg := prometheus.NewRegistry()
	opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	opts.Metrics = metrics.GRPCServerMetrics(reg)
	s := grpcserver.New(opts)
	p := probe{waiting: make(chan struct{}, 1)}
	s.GRPC().RegisterService(&probeDesc, p)

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
	return &testBundle{server: s, conn: conn, logs: logs, reg: reg, waiting: p.waiting}
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

	t.Run("ConcealsServerFailuresBehindACorrelationID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for kind, want := range map[string]codes.Code{"plain": codes.Internal, "unavailable": codes.Unavailable, "panic": codes.Internal} {
			st := status.Convert(b.callFail(t, kind))
			require.Equal(t, want, st.Code(), kind)
			m := correlationRE.FindStringSubmatch(st.Message())
			require.NotNil(t, m, "%s: %q carries a correlation id", kind, st.Message())
			for _, secret := range []string{"disk on fire", "pulsedb", "db.internal", "user="} {
				require.NotContains(t, st.Message(), secret, kind)
			}
			require.Contains(t, b.logs.String(), `"correlation_id":"`+m[1]+`"`, "the log line carries the same id")
		}
		require.Contains(t, b.logs.String(), "db.internal", "the log keeps the detail")
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

var correlationRE = regexp.MustCompile(`\(correlation id ([0-9a-f]{16})\)$`)

func TestReceiveLimits(t *testing.T) {
	t.Parallel()
	const (
		failMethod   = "/" + probeService + "/Fail"
		streamMethod = "/" + probeService + "/FailStream"
		maxRecv      = 256 << 10
		small        = 1 << 10
	)
	limits := grpcserver.Options{MaxRecvMsgSize: maxRecv, SmallMsgSize: small, LargeMethods: []string{failMethod}, InflightBytes: maxRecv}

	t.Run("SmallMethodsRefuseLargeMessages", func(t *testing.T) {
		t.Parallel()
		roomy := limits
		roomy.InflightBytes = 4 * maxRecv // the budget is not what this checks
		b := setupWith(t, roomy)
		big := strings.Repeat("x", 2*small)
		err := b.streamFail(t, big)
		require.Equal(t, codes.ResourceExhausted, status.Code(err), err)
		require.Contains(t, status.Convert(err).Message(), "larger than the 1024 this method accepts")
		require.ErrorIs(t, b.streamFail(t, "none"), io.EOF, "a small message passes (the stream ends cleanly)")
		require.NoError(t, b.callFail(t, strings.Repeat("x", 200<<10)), "the large method takes up to its bound")
		err = b.callFail(t, strings.Repeat("x", maxRecv+1))
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "and no more")
		require.Contains(t, status.Convert(err).Message(), "larger than max")
	})

	t.Run("CompressedMessagesDecompressAtMostToTheBound", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, limits)
		// 4 MiB of zeros compress to a few KiB; grpc-go stops
		// decompressing at MaxRecvMsgSize+1.
		err := b.conn.Invoke(t.Context(), failMethod, wrapperspb.String(strings.Repeat("\x00", 4<<20)),
			new(wrapperspb.StringValue), grpc.UseCompressor(gzip.Name))
		require.Equal(t, codes.ResourceExhausted, status.Code(err), err)
		require.Contains(t, status.Convert(err).Message(), "after decompression larger than max")
	})

	t.Run("LargeCallsWaitForTheInflightBudget", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, limits)
		ctx, cancel := context.WithCancel(t.Context())
		waited := make(chan error, 1)
		go func() {
			waited <- b.conn.Invoke(ctx, failMethod, wrapperspb.String("wait"), new(wrapperspb.StringValue))
		}()
		// The waiting call holds the whole budget once its handler runs.
		<-b.waiting
		second := make(chan error, 1)
		go func() { second <- b.callFail(t, "none") }()
		require.Eventually(t, func() bool { return grpcserver.BudgetWaiting(b.server) == 1 }, patience, time.Millisecond)
		select {
		case err := <-second:
			t.Fatalf("a second large call ran while the budget was spent: %v", err)
		default:
		}
		require.ErrorIs(t, b.streamFail(t, "none"), io.EOF, "small methods draw nothing (the stream ends cleanly)")

		// A call whose deadline passes while it waits ends with it,
		// having read nothing.
		short, cancelShort := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancelShort()
		err := b.conn.Invoke(short, failMethod, wrapperspb.String("none"), new(wrapperspb.StringValue))
		require.Equal(t, codes.DeadlineExceeded, status.Code(err), err)

		cancel()
		require.Equal(t, codes.Canceled, status.Code(<-waited))
		// Its end gives the budget back, and the waiting call runs.
		require.NoError(t, <-second)
		require.Zero(t, grpcserver.BudgetWaiting(b.server))
	})

	t.Run("CompressedCallsOfSmallMethodsWaitForTheBudget", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, limits)
		ctx, cancel := context.WithCancel(t.Context())
		waited := make(chan error, 1)
		go func() {
			waited <- b.conn.Invoke(ctx, failMethod, wrapperspb.String("wait"), new(wrapperspb.StringValue))
		}()
		<-b.waiting // the budget is spent

		compressed := make(chan error, 1)
		go func() {
			cs, err := b.conn.NewStream(t.Context(), &grpc.StreamDesc{ServerStreams: true}, streamMethod, grpc.UseCompressor(gzip.Name))
			if err != nil {
				compressed <- err
				return
			}
			if err := cs.SendMsg(wrapperspb.String("none")); err != nil {
				compressed <- err
				return
			}
			_ = cs.CloseSend()
			compressed <- cs.RecvMsg(new(wrapperspb.StringValue))
		}()
		require.Eventually(t, func() bool { return grpcserver.BudgetWaiting(b.server) == 1 }, patience, time.Millisecond)
		select {
		case err := <-compressed:
			t.Fatalf("a compressed call ran while the budget was spent: %v", err)
		default:
		}
		require.ErrorIs(t, b.streamFail(t, "none"), io.EOF, "an uncompressed one does not wait")

		cancel()
		require.Equal(t, codes.Canceled, status.Code(<-waited))
		require.ErrorIs(t, <-compressed, io.EOF, "the compressed call runs once the budget is back")
		require.Zero(t, grpcserver.BudgetWaiting(b.server))
	})

	t.Run("AdmitRunsFirstAndRefusesBeforeTheBudget", func(t *testing.T) {
		t.Parallel()
		opts := limits
		opts.Admit = func(ctx context.Context, info *tap.Info) (context.Context, error) {
			if len(info.Header.Get("authorization")) == 0 {
				return nil, status.Error(codes.Unauthenticated, "credentials required")
			}
			return ctx, nil
		}
		b := setupWith(t, opts)
		// Far past every bound, compressed: refused from the headers.
		err := b.conn.Invoke(t.Context(), streamMethod, wrapperspb.String(strings.Repeat("\x00", 4<<20)),
			new(wrapperspb.StringValue), grpc.UseCompressor(gzip.Name))
		require.Equal(t, codes.Unauthenticated, status.Code(err), err)
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer x")
		require.NoError(t, b.conn.Invoke(ctx, failMethod, wrapperspb.String("none"), new(wrapperspb.StringValue)))
	})
}

// patience bounds every wait on an event in these tests.
const patience = 30 * time.Second
