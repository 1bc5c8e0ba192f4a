package app_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"

	"github.com/pulsequeue/pulse/services/control-api/internal/app"
	"github.com/pulsequeue/pulse/services/control-api/internal/config"
)

// Credentials every auth test configures: a plain producer, a bcrypt
// operator, a worker and an operator token.
var (
	producer = authtest.Basic("prod", "prod-pass")
	operator = authtest.Basic("op", "op-pass")
	worker   = authtest.Basic("wk", "wk-pass")
	opToken  = authtest.Bearer("op-token")
)

type authBundle struct {
	app    *app.App
	scheme string
	http   *http.Client
	client pulsev1.ControlServiceClient
	topics pulsev1.TopicServiceClient
	health healthpb.HealthClient
}

// setupAuth starts the whole control-api with PULSE_AUTH_USERS and
// PULSE_AUTH_TOKENS set, over TLS when withTLS.
func setupAuth(t *testing.T, withTLS bool) *authBundle {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("op-pass"), bcrypt.MinCost)
	require.NoError(t, err)
	cfg := config.Default()
	cfg.DatabaseURL = pgtest.URL(t)
	cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.AuthUsers = "prod:producer:prod-pass,op:operator:" + string(hash) + ",wk:worker:wk-pass"
	cfg.AuthTokens = "ci:operator:op-token"
	transport := &http.Transport{}
	creds := insecure.NewCredentials()
	scheme := "http"
	if withTLS {
		certFile, keyFile, roots := authtest.SelfSignedCert(t)
		cfg.TLSCert, cfg.TLSKey = certFile, keyFile
		transport.TLSClientConfig = &tls.Config{RootCAs: roots}
		creds = credentials.NewTLS(&tls.Config{RootCAs: roots})
		scheme = "https"
	}
	require.NoError(t, cfg.Validate())

	a, err := app.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		transport.CloseIdleConnections()
		require.NoError(t, a.Stop(context.Background()))
	})
	return &authBundle{
		app: a, scheme: scheme, http: &http.Client{Transport: transport},
		client: pulsev1.NewControlServiceClient(conn), topics: pulsev1.NewTopicServiceClient(conn),
		health: healthpb.NewHealthClient(conn),
	}
}

type httpReply struct {
	status    int
	challenge string
	code      string
	body      string
}

func (b *authBundle) do(t *testing.T, method, path, body, authorization string) httpReply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.scheme+"://"+b.app.AdminAddr()+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := b.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := httpReply{status: resp.StatusCode, challenge: resp.Header.Get("WWW-Authenticate"), body: string(raw)}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil {
		r.code = e.Error.Code
	}
	return r
}

// submitHTTP submits one job as a producer and returns its id.
func (b *authBundle) submitHTTP(t *testing.T) string {
	t.Helper()
	r := b.do(t, "POST", "/v1/jobs", `{"topic":"auth.test"}`, producer)
	require.Equal(t, http.StatusCreated, r.status, r.body)
	var s struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &s))
	return s.ID
}

func as(ctx context.Context, authorization string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", authorization)
}

func TestAuth(t *testing.T) {
	t.Parallel()

	t.Run("HTTPChecksCredentialsThenRole", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t, false)

		r := b.do(t, "POST", "/v1/jobs", `{"topic":"auth.test"}`, "")
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)
		require.Equal(t, "unauthenticated", r.code)
		require.Equal(t, `Basic realm="pulse"`, r.challenge)
		r = b.do(t, "POST", "/v1/jobs", `{"topic":"auth.test"}`, authtest.Basic("prod", "wrong"))
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)

		id := b.submitHTTP(t)
		r = b.do(t, "GET", "/v1/jobs/"+id, "", producer)
		require.Equal(t, http.StatusOK, r.status, "producers read")
		r = b.do(t, "GET", "/v1/jobs/"+id, "", worker)
		require.Equal(t, http.StatusForbidden, r.status, "workers do not")
		require.Equal(t, "permission_denied", r.code)

		r = b.do(t, "POST", "/v1/jobs/"+id+"/cancel", "", producer)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		require.Equal(t, "permission_denied", r.code)
		require.Contains(t, r.body, "needs operator")
		require.Empty(t, r.challenge)

		r = b.do(t, "POST", "/v1/jobs/"+id+"/cancel", "", operator)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = b.do(t, "POST", "/v1/jobs/"+id+"/retry", "", opToken)
		require.Equal(t, http.StatusOK, r.status, "a bearer token works too: %s", r.body)
	})

	t.Run("HTTPPauseIsForOperatorsOnly", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t, false)
		for _, who := range []string{producer, worker} {
			r := b.do(t, "POST", "/v1/dispatch/pause", `{"reason":"upgrade"}`, who)
			require.Equal(t, http.StatusForbidden, r.status, r.body)
		}
		r := b.do(t, "POST", "/v1/dispatch/pause", `{"reason":"upgrade"}`, "")
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)
	})

	t.Run("HTTPProbesAndMetricsStayOpen", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t, false)
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			r := b.do(t, "GET", path, "", "")
			require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
		}
	})

	t.Run("GRPCChecksCredentialsThenRole", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t, false)
		ctx := t.Context()
		job := &pulsev1.SubmitJobRequest{Job: &pulsev1.JobSpec{Topic: "auth.test"}}

		_, err := b.client.SubmitJob(ctx, job)
		require.Equal(t, codes.Unauthenticated, status.Code(err), err)
		_, err = b.client.SubmitJob(as(ctx, authtest.Basic("nobody", "prod-pass")), job)
		require.Equal(t, codes.Unauthenticated, status.Code(err), err)
		_, err = b.client.SubmitJob(as(ctx, worker), job)
		require.Equal(t, codes.PermissionDenied, status.Code(err), err)

		res, err := b.client.SubmitJob(as(ctx, producer), job)
		require.NoError(t, err)
		id := res.GetResult().GetId()
		_, err = b.client.GetJob(as(ctx, producer), &pulsev1.GetJobRequest{Id: id})
		require.NoError(t, err)

		_, err = b.client.CancelJob(as(ctx, producer), &pulsev1.CancelJobRequest{Id: id})
		require.Equal(t, codes.PermissionDenied, status.Code(err), err)
		require.Contains(t, status.Convert(err).Message(), "needs operator")

		canceled, err := b.client.CancelJob(as(ctx, operator), &pulsev1.CancelJobRequest{Id: id})
		require.NoError(t, err)
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_CANCELED, canceled.GetJob().GetStatus())
		_, err = b.client.RetryJob(as(ctx, opToken), &pulsev1.RetryJobRequest{Id: id})
		require.NoError(t, err)
	})

	t.Run("GRPCHealthNeedsCredentialsOfAnyRole", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t, false)
		_, err := b.health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.Equal(t, codes.Unauthenticated, status.Code(err), err)
		for _, who := range []string{producer, worker, operator} {
			resp, err := b.health.Check(as(t.Context(), who), &healthpb.HealthCheckRequest{})
			require.NoError(t, err)
			require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
		}
	})

	t.Run("ServesBothTransportsOverTLS", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t, true)
		id := b.submitHTTP(t)
		got, err := b.client.GetJob(as(t.Context(), producer), &pulsev1.GetJobRequest{Id: id})
		require.NoError(t, err)
		require.Equal(t, id, got.GetJob().GetId())
		r := b.do(t, "GET", "/healthz", "", "")
		require.Equal(t, http.StatusOK, r.status)
	})

	t.Run("OpenModeAdmitsEveryone", func(t *testing.T) {
		t.Parallel()
		cfg := config.Default()
		cfg.Auth = "none"
		cfg.DatabaseURL = pgtest.URL(t)
		cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
		var logs strings.Builder
		a, err := app.New(t.Context(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
		require.NoError(t, err)
		require.NoError(t, a.Start(t.Context()))
		defer func() { require.NoError(t, a.Stop(t.Context())) }()
		require.Contains(t, logs.String(), "AUTHENTICATION IS OFF")

		conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		client := pulsev1.NewControlServiceClient(conn)
		res, err := client.SubmitJob(t.Context(), &pulsev1.SubmitJobRequest{Job: &pulsev1.JobSpec{Topic: "open"}})
		require.NoError(t, err)
		_, err = client.CancelJob(t.Context(), &pulsev1.CancelJobRequest{Id: res.GetResult().GetId()})
		require.NoError(t, err, "in open mode everyone is an operator")
	})

	t.Run("RefusesToStartWithBadSecurityConfig", func(t *testing.T) {
		t.Parallel()
		cfg := config.Default()
		cfg.DatabaseURL = "postgres://localhost:1/none"
		cfg.AuthTokens = "ci:operator:op-token"
		cfg.TLSCert = "/nonexistent/cert.pem"
		_, err := app.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		require.ErrorContains(t, err, "PULSE_TLS_KEY")
	})
}
