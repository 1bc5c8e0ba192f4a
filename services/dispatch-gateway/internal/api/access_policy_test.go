package api_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/api"
)

var (
	workerCreds   = authtest.Basic("wk", "wk-pass")
	producerCreds = authtest.Basic("prod", "prod-pass")
	operatorCreds = authtest.Bearer("op-token")
)

// setupAuth is setup with the gateway's authentication wired as the app
// wires it (leases bound to the identity, presence recorded): a worker, a
// producer and an operator token.
func setupAuth(t *testing.T) (*testBundle, healthpb.HealthClient) {
	t.Helper()
	authn, err := auth.New("wk:worker:wk-pass,prod:producer:prod-pass", "ops:operator:op-token")
	require.NoError(t, err)
	g := startGateway(t, pgtest.Pool(t), gatewayOpts{id: "gw-test", authn: authn})
	return &testBundle{store: g.store, client: g.client}, g.health
}

func as(ctx context.Context, authorization string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", authorization)
}

// openAs opens a stream with credentials and returns its first message or
// the error that ended it.
func openAs(t *testing.T, b *testBundle, authorization string) (pulsev1.DispatchService_StreamJobsClient, *pulsev1.StreamJobsResponse, error) {
	t.Helper()
	ctx := t.Context()
	if authorization != "" {
		ctx = as(ctx, authorization)
	}
	stream, err := b.client.StreamJobs(ctx)
	require.NoError(t, err)
	// A stream the server already refused answers Send with io.EOF; the
	// refusal's status is what Recv returns.
	if err := stream.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Open{Open: &pulsev1.OpenStream{
		WorkerId: "w1", Topics: []string{"t"}, Concurrency: 1}}}); err != nil && !errors.Is(err, io.EOF) {
		require.NoError(t, err)
	}
	msg, err := stream.Recv()
	return stream, msg, err
}

func TestAccessPolicy(t *testing.T) {
	t.Parallel()

	t.Run("NamesEveryDispatchServiceMethod", func(t *testing.T) {
		t.Parallel()
		policy := api.AccessPolicy()
		desc := pulsev1.DispatchService_ServiceDesc
		for _, m := range desc.Methods {
			require.Contains(t, policy, "/"+desc.ServiceName+"/"+m.MethodName)
		}
		for _, s := range desc.Streams {
			require.Contains(t, policy, "/"+desc.ServiceName+"/"+s.StreamName)
		}
	})

	t.Run("OnlyWorkersStreamJobs", func(t *testing.T) {
		t.Parallel()
		b, _ := setupAuth(t)
		insert(t, b.store, 1)

		_, _, err := openAs(t, b, "")
		require.Equal(t, codes.Unauthenticated, status.Code(err), err)
		_, _, err = openAs(t, b, authtest.Basic("wk", "wrong"))
		require.Equal(t, codes.Unauthenticated, status.Code(err), err)
		_, _, err = openAs(t, b, producerCreds)
		require.Equal(t, codes.PermissionDenied, status.Code(err), err)
		require.Contains(t, status.Convert(err).Message(), "it needs worker")
		_, _, err = openAs(t, b, operatorCreds)
		require.Equal(t, codes.PermissionDenied, status.Code(err), "an operator cannot act as a worker: %v", err)

		var running int
		require.NoError(t, b.store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE status = 'RUNNING'`).Scan(&running))
		require.Zero(t, running, "a rejected stream claims nothing")

		stream, msg, err := openAs(t, b, workerCreds)
		require.NoError(t, err)
		require.NotNil(t, msg.GetWelcome())
		a := recvJobs(t, stream, 1)[0]

		ref := &pulsev1.HeartbeatRequest{WorkerId: "w1", Jobs: []*pulsev1.JobRef{{JobId: a.GetJobId(), Attempt: a.GetAttempt()}}}
		for _, who := range []string{producerCreds, operatorCreds} {
			_, err = b.client.Heartbeat(as(t.Context(), who), ref)
			require.Equal(t, codes.PermissionDenied, status.Code(err), err)
		}
		_, err = b.client.Heartbeat(t.Context(), ref)
		require.Equal(t, codes.Unauthenticated, status.Code(err), err)
		hb, err := b.client.Heartbeat(as(t.Context(), workerCreds), ref)
		require.NoError(t, err)
		require.True(t, hb.GetResults()[0].GetLeaseHeld())

		done := &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{{
			JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_COMPLETE}}}
		for _, who := range []string{producerCreds, operatorCreds} {
			_, err = b.client.ReportResult(as(t.Context(), who), done)
			require.Equal(t, codes.PermissionDenied, status.Code(err), err)
		}
		resp, err := b.client.ReportResult(as(t.Context(), workerCreds), done)
		require.NoError(t, err)
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_COMPLETED, resp.GetAcks()[0].GetStatus())
	})

	t.Run("HealthNeedsCredentialsOfAnyRole", func(t *testing.T) {
		t.Parallel()
		_, health := setupAuth(t)
		_, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.Equal(t, codes.Unauthenticated, status.Code(err), err)
		resp, err := health.Check(as(t.Context(), workerCreds), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	})
}
