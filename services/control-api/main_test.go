package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pulsequeue/pulse/migrations"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	serverconfig "github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/migrate"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"

	"github.com/pulsequeue/pulse/services/control-api/internal/config"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runToEnd runs the binary to completion with env (and no PULSE_ or
// OTEL_ variable of the machine's).
func runToEnd(t *testing.T, bin string, env []string, args ...string) proctest.Result {
	t.Helper()
	return proctest.Run(t, bin, proctest.Env(env...), args...)
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

func TestBinary(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, ".", "control-api")

	t.Run("MigrateThenServeThenStopCleanlyOnSIGTERM", func(t *testing.T) {
		t.Parallel()
		dbURL := pgtest.EmptyURL(t)
		res := runToEnd(t, bin, []string{"PULSE_DATABASE_URL=" + dbURL}, "migrate")
		require.Equal(t, 0, res.Code, "stdout: %s\nstderr: %s", res.Stdout, res.Stderr)
		conn, err := pgx.Connect(t.Context(), dbURL)
		require.NoError(t, err)
		v, err := migrate.Version(t.Context(), conn)
		require.NoError(t, err)
		var jobsTable *string
		require.NoError(t, conn.QueryRow(t.Context(), `SELECT to_regclass('jobs')::text`).Scan(&jobsTable))
		require.NoError(t, conn.Close(t.Context()))
		require.Equal(t, migrations.Latest, v)
		require.NotNil(t, jobsTable, "migrate created the jobs table")

		httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
		p := proctest.Start(t, bin, proctest.Env("PULSE_DATABASE_URL="+dbURL, "PULSE_HTTP_ADDR="+httpAddr,
			"PULSE_GRPC_ADDR="+grpcAddr, "PULSE_SHUTDOWN_TIMEOUT=10s", "PULSE_AUTH=none"))

		base := "http://" + httpAddr
		p.WaitHTTP(t, base+"/healthz", http.StatusOK)
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			resp, err := http.Get(base + path)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, path)
		}

		resp, err := http.Post(base+"/v1/jobs", "application/json", strings.NewReader(`{"topic":"e2e.http","args":{"n":1}}`))
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		var sub struct{ ID string }
		require.NoError(t, json.Unmarshal(body, &sub))

		// Request metrics by route pattern, method and code; the build.
		resp, err = http.Get(base + "/v1/jobs/" + sub.ID)
		require.NoError(t, err)
		_ = resp.Body.Close()
		resp, err = http.Get(base + "/metrics")
		require.NoError(t, err)
		metricsText, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Contains(t, string(metricsText), `http_server_requests_total{code="201",method="POST",route="/v1/jobs"} 1`)
		require.Contains(t, string(metricsText), `http_server_requests_total{code="200",method="GET",route="/v1/jobs/{id}"} 1`)
		require.Contains(t, string(metricsText), `http_server_request_duration_seconds_count{method="POST",route="/v1/jobs"} 1`)
		require.Contains(t, string(metricsText), `pulse_build_info{service="control-api",version=`)
		require.Contains(t, string(metricsText), `pulse_loop_errors_total{loop="queue_depth"} 0`)
		// The queue depth was counted at start (Immediate), and says when.
		proctest.WaitFor(t, "pulse_queue_depth_counted_timestamp_seconds to be set by the first count", func() bool {
			_, text := proctest.Get(base + "/metrics")
			m := regexp.MustCompile(`(?m)^pulse_queue_depth_counted_timestamp_seconds (\S+)$`).FindStringSubmatch(text)
			if m == nil {
				return false
			}
			at, err := strconv.ParseFloat(m[1], 64)
			return err == nil && time.Since(time.Unix(int64(at), 0)) < time.Hour
		})

		conn2, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn2.Close()
		hc, err := healthpb.NewHealthClient(conn2).Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, hc.GetStatus())
		got, err := pulsev1.NewControlServiceClient(conn2).GetJob(t.Context(), &pulsev1.GetJobRequest{Id: sub.ID})
		require.NoError(t, err)
		require.Equal(t, "e2e.http", got.GetJob().GetTopic())
		require.NoError(t, conn2.Close())

		p.Stop(t)
		require.Contains(t, p.Stdout.String(), "stopped cleanly")
	})

	t.Run("TwoMigrateRunsAtOnceBothSucceedAndApplyOnce", func(t *testing.T) {
		t.Parallel()
		dbURL := pgtest.EmptyURL(t)
		type run struct {
			out []byte
			err error
		}
		runs := make(chan run, 2)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		for range 2 {
			go func() {
				cmd := exec.CommandContext(ctx, bin, "migrate")
				cmd.Env = proctest.Env("PULSE_DATABASE_URL=" + dbURL)
				out, err := cmd.CombinedOutput()
				runs <- run{out, err}
			}()
		}
		for range 2 {
			r := <-runs
			require.NoError(t, r.err, "%s", r.out)
			require.Contains(t, string(r.out), "database schema is current")
		}
		conn, err := pgx.Connect(t.Context(), dbURL)
		require.NoError(t, err)
		defer conn.Close(t.Context())
		var applied int
		require.NoError(t, conn.QueryRow(t.Context(),
			`SELECT count(*) FROM goose_db_version WHERE version_id > 0 AND is_applied`).Scan(&applied))
		require.Equal(t, int(migrations.Latest), applied, "each migration recorded once")
	})

	t.Run("ServeRefusesAnUnmigratedDatabaseNamingTheVersion", func(t *testing.T) {
		t.Parallel()
		res := runToEnd(t, bin, []string{
			"PULSE_DATABASE_URL=" + pgtest.EmptyURL(t),
			"PULSE_HTTP_ADDR=127.0.0.1:0", "PULSE_GRPC_ADDR=127.0.0.1:0", "PULSE_AUTH=none",
		})
		require.NotEqual(t, 0, res.Code)
		require.Contains(t, res.Stderr, fmt.Sprintf("needs version %d or newer", migrations.VersionConcurrencyKeys))
	})

	t.Run("BadConfigurationExitsNamingTheVariable", func(t *testing.T) {
		t.Parallel()
		const db = "PULSE_DATABASE_URL=postgres://localhost:1/none"
		cases := []struct {
			name string
			env  []string
			want string
		}{
			{"GRPCAddrNotHostPort", []string{db, "PULSE_GRPC_ADDR=nonsense"}, "PULSE_GRPC_ADDR"},
			{"GRPCAddrPortOutOfRange", []string{db, "PULSE_GRPC_ADDR=:70000"}, "PULSE_GRPC_ADDR"},
			{"ShutdownTimeoutNotADuration", []string{db, "PULSE_SHUTDOWN_TIMEOUT=soon"}, "PULSE_SHUTDOWN_TIMEOUT"},
			{"ShutdownTimeoutNegative", []string{db, "PULSE_SHUTDOWN_TIMEOUT=-1s"}, "PULSE_SHUTDOWN_TIMEOUT"},
			{"DatabaseURLMissing", nil, "PULSE_DATABASE_URL"},
			{"FlushersZero", []string{db, "PULSE_SUBMIT_FLUSHERS=0"}, "PULSE_SUBMIT_FLUSHERS"},
			{"LogLevelUnknown", []string{db, "PULSE_LOG_LEVEL=loud"}, "PULSE_LOG_LEVEL"},
			{"AuthUsersUnknownRole", []string{db, "PULSE_AUTH_USERS=ann:admin:hunter2"}, "PULSE_AUTH_USERS: entry 1 (ann): role \"admin\""},
			{"AuthUsersNotTriples", []string{db, "PULSE_AUTH_USERS=ann:producer:pw,hunter2"}, "PULSE_AUTH_USERS: entry 2"},
			{"AuthTokensDuplicate", []string{db, "PULSE_AUTH_TOKENS=a:worker:hunter2,b:worker:hunter2"}, "PULSE_AUTH_TOKENS"},
			{"TLSHalfAKeypair", []string{db, "PULSE_AUTH=none", "PULSE_TLS_CERT=/nonexistent/cert.pem"}, "PULSE_TLS_KEY"},
			// Secure defaults: no credentials is a refusal unless open mode
			// is asked for, and credentials never cross a non-loopback
			// listener in the clear unless that is asked for.
			{"NoCredentialsWithoutOpenMode", []string{db}, "PULSE_AUTH: is required (the default) but no credentials are configured: set PULSE_AUTH_USERS, PULSE_AUTH_TOKENS or PULSE_AUTH_CERTS, or set PULSE_AUTH=none"},
			{"AuthModeUnknown", []string{db, "PULSE_AUTH=off"}, `PULSE_AUTH: "off" is not required or none`},
			{"OpenModeWithCredentials", []string{db, "PULSE_AUTH=none", "PULSE_AUTH_TOKENS=ci:operator:hunter2"}, "PULSE_AUTH_TOKENS: is set but PULSE_AUTH=none"},
			{"PlaintextTokensOnAllInterfaces", []string{db, "PULSE_AUTH_TOKENS=ci:operator:hunter2"}, `PULSE_ALLOW_PLAINTEXT_CREDENTIALS: is not true, and PULSE_HTTP_ADDR=":8080" listens beyond loopback without TLS`},
			{"PlaintextUsersOnAPublicGRPCAddr", []string{db, "PULSE_HTTP_ADDR=127.0.0.1:0", "PULSE_GRPC_ADDR=0.0.0.0:0", "PULSE_AUTH_USERS=ann:producer:hunter2"}, `PULSE_ALLOW_PLAINTEXT_CREDENTIALS: is not true, and PULSE_GRPC_ADDR="0.0.0.0:0"`},
			{"ClientCAWithoutKeypair", []string{db, "PULSE_AUTH=none", "PULSE_TLS_CLIENT_CA=/nonexistent/ca.pem"}, "PULSE_TLS_CLIENT_CA: is set but PULSE_TLS_CERT and PULSE_TLS_KEY are not"},
			{"CertIdentitiesWithoutClientCA", []string{db, "PULSE_AUTH_CERTS=wk:worker"}, "PULSE_AUTH_CERTS: is set but PULSE_TLS_CLIENT_CA is not"},
			{"CertIdentityUnknownRole", []string{db, "PULSE_AUTH_CERTS=wk:root"}, "PULSE_AUTH_CERTS"},
			{"QueueDepthIntervalZero", []string{db, "PULSE_QUEUE_DEPTH_INTERVAL=0s"}, "PULSE_QUEUE_DEPTH_INTERVAL"},
			{"UITraceURLWithoutPlaceholder", []string{db, "PULSE_UI_TRACE_URL=http://jaeger:16686/trace/"}, "PULSE_UI_TRACE_URL: \"http://jaeger:16686/trace/\" has no {trace_id}"},
			{"UITraceURLNotHTTP", []string{db, "PULSE_UI_TRACE_URL=jaeger/{trace_id}"}, "not an absolute http or https URL"},
			{"UIRefreshTooFast", []string{db, "PULSE_UI_REFRESH=10ms"}, "PULSE_UI_REFRESH: must be at least 250ms"},
			{"MigrateLockTimeoutZero", []string{db, "PULSE_MIGRATE_LOCK_TIMEOUT=0s"}, "PULSE_MIGRATE_LOCK_TIMEOUT: must be positive"},
			{"MigrateLockTimeoutMinutes", []string{db, "PULSE_MIGRATE_LOCK_TIMEOUT=5m"}, "PULSE_MIGRATE_LOCK_TIMEOUT: must be positive and at most 1m0s, got 5m0s"},
			{"MigrateLockTimeoutNotADuration", []string{db, "PULSE_MIGRATE_LOCK_TIMEOUT=5"}, "PULSE_MIGRATE_LOCK_TIMEOUT"},
			{"MigrateLockRetriesNegative", []string{db, "PULSE_MIGRATE_LOCK_RETRIES=-1"}, "PULSE_MIGRATE_LOCK_RETRIES: must be 0 to 1000, got -1"},
			{"MigrateLockRetriesHuge", []string{db, "PULSE_MIGRATE_LOCK_RETRIES=99999999999999999999"}, "PULSE_MIGRATE_LOCK_RETRIES"},
		}
		for _, tc := range cases {
			res := runToEnd(t, bin, tc.env)
			require.NotEqual(t, 0, res.Code, tc.name)
			require.Contains(t, res.Stderr, tc.want, tc.name)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(res.Stderr), "\n")+1, "%s: one line: %q", tc.name, res.Stderr)
			require.NotContains(t, res.Stderr, "hunter2", "%s: secrets stay out of errors", tc.name)
		}
	})

	t.Run("HelpListsSubcommandsAndEveryVariable", func(t *testing.T) {
		t.Parallel()
		res := runToEnd(t, bin, nil, "--help")
		require.Equal(t, 0, res.Code)
		require.Contains(t, res.Stdout, "migrate")
		vars, err := serverconfig.Vars(config.Config{})
		require.NoError(t, err)
		require.Len(t, vars, reflect.TypeOf(config.Config{}).NumField(), "every field of Config is a variable")
		for _, v := range vars {
			require.Contains(t, res.Stdout, v)
		}

		res = runToEnd(t, bin, nil, "frobnicate")
		require.NotEqual(t, 0, res.Code)
		require.Contains(t, res.Stderr, `unknown subcommand "frobnicate"`)
	})
}
