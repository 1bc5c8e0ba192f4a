// Package servicetest checks what every pulse service promises about its
// shutdown (pkg/server/service): readiness flips — /readyz 503, gRPC health
// NOT_SERVING — while both listeners still answer, and only then do the
// listeners close.
package servicetest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pulsequeue/pulse/pkg/server/service"
)

// patience bounds each wait; it is a hang guard, not a speed assertion.
const patience = time.Minute

// seen is what the probe found when the runtime stopped it.
type seen struct {
	stopped    bool
	readyz     int
	readyzErr  error
	grpc       healthpb.HealthCheckResponse_ServingStatus
	grpcErr    error
	grpcServed bool
}

// probe is a worker added before the service's own, so the runtime stops
// it last of the workers: after readiness flipped and every other worker
// stopped, right before the listeners close.
type probe struct {
	s    **service.Service
	seen *seen
}

func (p probe) Start(context.Context) error { return nil }

func (p probe) Stop(ctx context.Context) error {
	s := *p.s
	p.seen.stopped = true
	p.seen.readyz, p.seen.readyzErr = get(ctx, "http://"+s.AdminAddr()+"/readyz")
	if addr := s.GRPCAddr(); addr != "" {
		p.seen.grpcServed = true
		p.seen.grpc, p.seen.grpcErr = health(ctx, addr)
	}
	return nil
}

// RequireReadinessFlipsBeforeListenersClose builds spec (its addresses
// should be 127.0.0.1:0), starts it, waits until /readyz answers 200 (and
// gRPC health SERVING, when it serves gRPC), stops it, and requires that
// when the wind-down ended the service answered /readyz with 503 and gRPC
// health with NOT_SERVING, and that afterwards nothing listens on either
// address.
func RequireReadinessFlipsBeforeListenersClose(t *testing.T, spec service.Spec) {
	t.Helper()
	var s *service.Service
	var got seen
	build := spec.Build
	spec.Build = func(ctx context.Context, svc *service.Service) error {
		svc.Add("readiness_probe", probe{s: &s, seen: &got})
		if build == nil {
			return nil
		}
		return build(ctx, svc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	var err error
	s, err = service.New(ctx, spec)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	admin, grpcAddr := s.AdminAddr(), s.GRPCAddr()

	require.Eventually(t, func() bool {
		code, err := get(ctx, "http://"+admin+"/readyz")
		return err == nil && code == http.StatusOK
	}, patience, 20*time.Millisecond, "/readyz never answered 200")
	if grpcAddr != "" {
		st, err := health(ctx, grpcAddr)
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, st)
	}

	require.NoError(t, s.Stop(ctx))
	require.True(t, got.stopped, "the probe was stopped")
	require.NoError(t, got.readyzErr, "the HTTP listener still answered once the workers had stopped")
	require.Equal(t, http.StatusServiceUnavailable, got.readyz, "/readyz during the wind-down")
	if grpcAddr != "" {
		require.True(t, got.grpcServed)
		require.NoError(t, got.grpcErr, "the gRPC listener still answered once the workers had stopped")
		require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, got.grpc, "gRPC health during the wind-down")
	}

	_, err = get(ctx, "http://"+admin+"/readyz")
	require.Error(t, err, "the HTTP listener is closed after Stop")
	if grpcAddr != "" {
		_, err := health(ctx, grpcAddr)
		require.Error(t, err, "the gRPC listener is closed after Stop")
	}
}

func get(ctx context.Context, url string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	// A fresh connection each time: a kept-alive one would outlive the
	// listener and hide that it closed.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func health(ctx context.Context, addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return 0, err
	}
	return res.GetStatus(), nil
}
