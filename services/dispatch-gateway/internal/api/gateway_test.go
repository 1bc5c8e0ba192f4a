package api_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/api"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/pause"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/presence"
)

// gatewayOpts shape one gateway replica in a test.
type gatewayOpts struct {
	id    string
	authn *auth.Authenticator // nil: open mode
	// Zero values are the service's defaults (presence) or fast test
	// values (poll).
	pollInterval     time.Duration
	presenceInterval time.Duration
	presenceTTL      time.Duration
	// withPause runs the pause gate's refresher too (polling only), as
	// the app does.
	withPause bool
	// maxStreams is MaxStreamsPerIdentity (0: no cap); observer the
	// service's observer (nil: none).
	maxStreams int
	observer   api.Observer
}

// gateway is a replica wired as the app wires it, serving gRPC on a local
// port: the dispatcher, the presence tracker, authentication with leases
// bound to the identity when authn is set. Replicas started on the same
// pool share one database, as a fleet does.
type gateway struct {
	store    *jobstore.Store
	registry *dispatch.Registry
	client   pulsev1.DispatchServiceClient
	health   healthpb.HealthClient
	tracker  *presence.Tracker
	stop     func()
}

func startGateway(t *testing.T, pool *pgxpool.Pool, o gatewayOpts) *gateway {
	t.Helper()
	if o.pollInterval == 0 {
		o.pollInterval = 20 * time.Millisecond
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := jobstore.New(pool)
	d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: o.pollInterval, Batch: 100}, store, nil, logger)
	tracker := presence.New(store, presence.Config{Gateway: o.id, Interval: o.presenceInterval, TTL: o.presenceTTL}, logger)
	cfg := api.Config{GatewayID: o.id, LeaseTTL: time.Minute, HeartbeatInterval: 20 * time.Second,
		BindLeases: o.authn != nil, Presence: tracker, MaxStreamsPerIdentity: o.maxStreams}
	var refresher *pause.Refresher
	if o.withPause {
		gate := pause.NewGate()
		d.SetGate(gate)
		cfg.Pause = gate
		refresher = pause.NewRefresher(gate, store, pause.RefresherConfig{OnChange: d.JobsReady}, logger)
		require.NoError(t, refresher.Prime(t.Context()))
	}
	svc := api.NewDispatchService(cfg, store, d.Registry(), o.observer, logger)
	srv := grpcserver.New(grpcserver.Options{
		Logger: logger,
		Admit:  auth.TapHandle(o.authn, api.AccessPolicy()),
	})
	pulsev1.RegisterDispatchServiceServer(srv.GRPC(), svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	loopCtx, stopLoops := context.WithCancel(context.Background())
	loopsDone := make(chan struct{}, 3)
	go func() { d.Run(loopCtx); loopsDone <- struct{}{} }()
	go func() {
		if refresher != nil {
			refresher.Run(loopCtx)
		}
		loopsDone <- struct{}{}
	}()
	presenceCtx, stopPresence := context.WithCancel(context.Background())
	presenceDone := make(chan struct{})
	go func() { tracker.Run(presenceCtx); close(presenceDone) }()
	serveDone := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(serveDone) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		conn.Close()
		stopLoops()
		<-loopsDone
		<-loopsDone
		svc.Shutdown()
		stopCtx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = srv.Stop(stopCtx)
		<-serveDone
		stopPresence()
		<-presenceDone
	}
	t.Cleanup(stop)
	return &gateway{store: store, registry: d.Registry(), client: pulsev1.NewDispatchServiceClient(conn), health: healthpb.NewHealthClient(conn),
		tracker: tracker, stop: stop}
}
