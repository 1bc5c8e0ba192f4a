package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// cliBinary is the pulse CLI, built once from cli/cmd/pulse.
var cliBinary = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := localfleet.FindRepoRoot(".")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(binDir, "pulse")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cli/cmd/pulse")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the pulse CLI: %w\n%s", err, out)
	}
	return bin, nil
})

type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the real pulse binary with no PULSE_* environment of the
// test's own and a throwaway config directory.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	bin, err := cliBinary()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	home := t.TempDir()
	cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home, "PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// tlsFleet starts control-api and one gateway serving TLS with a server
// certificate of ca, plus env.
func tlsFleet(t *testing.T, ca *authtest.CA, env map[string]string) *localfleet.Fleet {
	t.Helper()
	cert, key := ca.Issue(t, "localhost")
	env["PULSE_TLS_CERT"], env["PULSE_TLS_KEY"] = cert, key
	return upFleet(t, localfleet.Options{Gateways: 1, Binaries: binaries(t), CAFile: ca.File, Env: env})
}

// runOne submits one job of topic with producer, runs a worker with opts
// until the job completes, and returns the lease holder the job had while
// its handler ran, read from the database.
func runOne(t *testing.T, f *localfleet.Fleet, producer *pulse.Client, topic string, opts ...pulse.WorkerOption) (lockedBy string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Patience)
	defer cancel()
	running := make(chan string, 1)
	release := make(chan struct{})
	w, err := pulse.NewWorker(f.GatewayAddrs, append([]pulse.WorkerOption{
		pulse.WithWorkerID("w-" + topic), pulse.WithConcurrency(1),
		pulse.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}, opts...)...)
	require.NoError(t, err)
	w.Register(topic, func(ctx context.Context, job *pulse.Job) error {
		running <- job.ID
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	sub, err := producer.Enqueue(ctx, topic, map[string]int{"n": 1})
	require.NoError(t, err)
	select {
	case id := <-running:
		require.Equal(t, sub.ID, id)
	case err := <-done:
		t.Fatalf("the worker stopped before running the job: %v", err)
	case <-ctx.Done():
		t.Fatal("the job never reached the worker")
	}
	db, err := pgx.Connect(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(ctx)
	require.NoError(t, db.QueryRow(ctx, `SELECT locked_by FROM jobs WHERE id = $1`, sub.ID).Scan(&lockedBy))
	close(release)
	proctest.WaitFor(t, "job "+sub.ID+" to complete", func() bool {
		j, err := producer.Get(ctx, sub.ID)
		return err == nil && j.Status == "COMPLETED"
	})
	return lockedBy
}

// TestTLSCarriesPasswordsToTheRealServices: control-api and the gateway
// serve TLS; an SDK producer and worker and the CLI binary authenticate
// with passwords over it, trusting the test's CA. Without the CA, or in
// plaintext, nothing gets through; the SDK refuses to send the password
// over plaintext beyond loopback at all.
func TestTLSCarriesPasswordsToTheRealServices(t *testing.T) {
	t.Parallel()
	ca := authtest.NewCA(t, "pulse e2e CA")
	f := tlsFleet(t, ca, map[string]string{"PULSE_AUTH_USERS": "ops:operator:ops-pw,pat:producer:pat-pw,wk:worker:wk-pw"})
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Patience)
	defer cancel()
	require.True(t, strings.HasPrefix(f.ControlHTTP, "https://"), f.ControlHTTP)

	producer, err := pulse.NewClient(f.ControlGRPC, pulse.WithTLSFiles(ca.File, "", ""), pulse.WithUserPass("pat", "pat-pw"))
	require.NoError(t, err)
	defer producer.Close()
	lockedBy := runOne(t, f, producer, "e2e.tls", pulse.WithTLSFiles(ca.File, "", ""), pulse.WithUserPass("wk", "wk-pw"))
	require.Equal(t, "wk/w-e2e.tls", lockedBy)

	// The CLI binary over HTTPS, trusting the CA.
	r := runCLI(t, "--server", f.ControlHTTP, "--ca-file", ca.File, "--user", "ops", "--password", "ops-pw", "jobs", "list", "--topic", "e2e.tls", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"COMPLETED"`)
	r = runCLI(t, "--server", f.ControlHTTP, "--ca-file", ca.File, "--user", "ops", "--password", "wrong", "jobs", "list")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "invalid credentials")
	r = runCLI(t, "--server", f.ControlHTTP, "--user", "ops", "--password", "ops-pw", "jobs", "list")
	require.Equal(t, 1, r.code, "the system's roots do not trust the test's CA")
	require.Contains(t, r.stderr, "certificate")

	// Plaintext to a TLS listener fails; an SDK client without the CA too.
	plain, err := pulse.NewClient(f.ControlGRPC, pulse.WithUserPass("pat", "pat-pw"))
	require.NoError(t, err, "loopback: the SDK allows plaintext credentials")
	defer plain.Close()
	_, err = plain.Enqueue(ctx, "e2e.tls", nil)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	untrusting, err := pulse.NewClient(f.ControlGRPC, pulse.WithTLS(nil), pulse.WithUserPass("pat", "pat-pw"))
	require.NoError(t, err)
	defer untrusting.Close()
	_, err = untrusting.Enqueue(ctx, "e2e.tls", nil)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "certificate")

	// The same credentials to an address that is not loopback, in
	// plaintext: the SDK refuses before dialing; so does the CLI.
	for _, target := range []string{"pulse.invalid:50051", "dns:///pulse.invalid:50051"} {
		_, err = pulse.NewClient(target, pulse.WithUserPass("pat", "pat-pw"))
		require.ErrorIs(t, err, pulse.ErrPlaintextCredentials)
		_, err = pulse.NewWorker([]string{f.GatewayAddrs[0], target}, pulse.WithUserPass("wk", "wk-pw"))
		require.ErrorIs(t, err, pulse.ErrPlaintextCredentials)
	}
	r = runCLI(t, "--server", "http://pulse.invalid:8080", "--user", "ops", "--password", "ops-pw", "jobs", "list")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "refusing to send credentials over plain http")
}

// TestMutualTLSIdentifiesCallersByCertificate: with PULSE_TLS_CLIENT_CA
// and PULSE_AUTH_CERTS, an SDK worker and producer and the CLI binary
// authenticate by client certificate alone; the certificate's common name
// is the identity (the worker's leases are held in its name) and the
// mapping its role. A worker with no certificate, one of another CA, or
// an unmapped or wrong-role one is refused.
func TestMutualTLSIdentifiesCallersByCertificate(t *testing.T) {
	t.Parallel()
	ca := authtest.NewCA(t, "pulse e2e CA")
	f := tlsFleet(t, ca, map[string]string{
		"PULSE_TLS_CLIENT_CA": ca.File,
		"PULSE_AUTH_CERTS":    "billing-worker:worker,billing-api:producer,oncall:operator",
	})
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Patience)
	defer cancel()
	cert := func(name string) pulse.ConnOption {
		c, k := ca.Issue(t, name)
		return pulse.WithTLSFiles(ca.File, c, k)
	}

	producer, err := pulse.NewClient(f.ControlGRPC, cert("billing-api"))
	require.NoError(t, err)
	defer producer.Close()
	lockedBy := runOne(t, f, producer, "e2e.mtls", cert("billing-worker"))
	require.Equal(t, "billing-worker/w-e2e.mtls", lockedBy, "the certificate's name holds the lease")

	// The role comes from PULSE_AUTH_CERTS: a producer may submit, not cancel.
	sub, err := producer.Enqueue(ctx, "e2e.mtls.unserved", nil)
	require.NoError(t, err)
	_, err = producer.Cancel(ctx, sub.ID)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	oncall, err := pulse.NewClient(f.ControlGRPC, cert("oncall"))
	require.NoError(t, err)
	defer oncall.Close()
	_, err = oncall.Cancel(ctx, sub.ID)
	require.NoError(t, err, "the operator's certificate may cancel")

	// Workers the gateway refuses: the SDK gives up with ErrWorkerRefused
	// when the certificate verifies but is not admitted.
	for name, opt := range map[string]pulse.ConnOption{
		"Unmapped":  cert("mallory"),
		"WrongRole": cert("billing-api"),
	} {
		w, err := pulse.NewWorker(f.GatewayAddrs, pulse.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), opt)
		require.NoError(t, err)
		w.Register("e2e.mtls", func(context.Context, *pulse.Job) error { return nil })
		err = w.Run(ctx)
		require.ErrorIs(t, err, pulse.ErrWorkerRefused, name)
	}
	// No certificate, or one of another CA: the handshake itself fails,
	// before any call.
	other := authtest.NewCA(t, "another CA")
	oc, ok := other.Issue(t, "billing-worker")
	otherPair, err := tls.LoadX509KeyPair(oc, ok)
	require.NoError(t, err)
	for name, cfg := range map[string]*tls.Config{
		"NoCertificate": {RootCAs: ca.Pool},
		"AnotherCA": {RootCAs: ca.Pool, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &otherPair, nil
		}},
	} {
		conn, err := grpc.NewClient(f.GatewayAddrs[0], grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		require.NoError(t, err)
		stream, err := pulsev1.NewDispatchServiceClient(conn).StreamJobs(ctx)
		if err == nil {
			_, err = stream.Recv()
		}
		require.Equal(t, codes.Unavailable, status.Code(err), "%s: %v", name, err)
		require.NoError(t, conn.Close())
	}

	// The CLI binary with a client certificate, against the HTTPS API.
	oncallCert, oncallKey := ca.Issue(t, "oncall")
	apiCert, apiKey := ca.Issue(t, "billing-api")
	r := runCLI(t, "--server", f.ControlHTTP, "--ca-file", ca.File, "--client-cert", oncallCert, "--client-key", oncallKey,
		"dispatch", "pause", "--reason", "mtls test")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, "--server", f.ControlHTTP, "--ca-file", ca.File, "--client-cert", oncallCert, "--client-key", oncallKey, "dispatch", "resume")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, "--server", f.ControlHTTP, "--ca-file", ca.File, "--client-cert", apiCert, "--client-key", apiKey,
		"dispatch", "pause", "--reason", "not mine")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "permission_denied")
	r = runCLI(t, "--server", f.ControlHTTP, "--ca-file", ca.File, "--client-cert", apiCert, "--client-key", apiKey, "jobs", "get", sub.ID, "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"CANCELED"`)
	r = runCLI(t, "--server", f.ControlHTTP, "--ca-file", ca.File, "jobs", "list")
	require.Equal(t, 1, r.code, "no certificate and no credentials")
	require.Contains(t, r.stderr, "unauthenticated")
}

// TestServicesRefuseInsecureStarts runs the real control-api and
// dispatch-gateway binaries with settings they must refuse, and reads the
// refusal from their stderr and exit code. Nothing is started: the checks
// run before the database is tried.
func TestServicesRefuseInsecureStarts(t *testing.T) {
	t.Parallel()
	bins := binaries(t)
	const db = "PULSE_DATABASE_URL=postgres://pulse@127.0.0.1:1/pulse"
	cert, key, _ := authtest.SelfSignedCert(t)
	cases := []struct {
		name, bin string
		env       []string
		want      string
	}{
		{"GatewayWithoutCredentials", localfleet.DispatchGateway, []string{db},
			"PULSE_AUTH: is required (the default) but no credentials are configured: set PULSE_AUTH_USERS, PULSE_AUTH_TOKENS or PULSE_AUTH_CERTS, or set PULSE_AUTH=none"},
		{"ControlAPIWithoutCredentials", localfleet.ControlAPI, []string{db, "PULSE_HTTP_ADDR=127.0.0.1:0", "PULSE_GRPC_ADDR=127.0.0.1:0"},
			"PULSE_AUTH: is required (the default) but no credentials are configured"},
		{"GatewayPlaintextTokensOnEveryInterface", localfleet.DispatchGateway, []string{db, "PULSE_AUTH_TOKENS=wk:worker:hunter2"},
			`PULSE_ALLOW_PLAINTEXT_CREDENTIALS: is not true, and PULSE_GRPC_ADDR=":50052" listens beyond loopback without TLS`},
		{"ControlAPIPlaintextUsersOnAPublicAddress", localfleet.ControlAPI, []string{db, "PULSE_AUTH_USERS=ops:operator:hunter2", "PULSE_HTTP_ADDR=0.0.0.0:0", "PULSE_GRPC_ADDR=127.0.0.1:0"},
			`PULSE_ALLOW_PLAINTEXT_CREDENTIALS: is not true, and PULSE_HTTP_ADDR="0.0.0.0:0"`},
		{"GatewayOpenModeWithCredentials", localfleet.DispatchGateway, []string{db, "PULSE_AUTH=none", "PULSE_AUTH_USERS=ops:operator:hunter2"},
			"PULSE_AUTH_USERS: is set but PULSE_AUTH=none"},
		{"GatewayCertsWithoutClientCA", localfleet.DispatchGateway, []string{db, "PULSE_AUTH_CERTS=wk:worker"},
			"PULSE_AUTH_CERTS: is set but PULSE_TLS_CLIENT_CA is not"},
		// gRPC is TLS, but /metrics credentials would cross the admin
		// port, which is always plaintext.
		{"GatewayMetricsCredentialsOnThePlaintextAdminPort", localfleet.DispatchGateway,
			[]string{db, "PULSE_AUTH_TOKENS=wk:worker:hunter2", "PULSE_TLS_CERT=" + cert, "PULSE_TLS_KEY=" + key, "PULSE_METRICS_AUTH=true"},
			`PULSE_ALLOW_PLAINTEXT_CREDENTIALS: is not true, and PULSE_ADMIN_ADDR=":9101" listens beyond loopback without TLS`},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), proctest.Patience)
		cmd := exec.CommandContext(ctx, bins[c.bin])
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, c.env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		cancel()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s: the binary must refuse to start\nstderr: %s", c.name, stderr.String())
		require.Equal(t, 1, ee.ExitCode(), c.name)
		require.Contains(t, stderr.String(), c.want, c.name)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr.String()), "\n")+1, "%s: one line: %q", c.name, stderr.String())
		require.NotContains(t, stderr.String(), "hunter2", "%s: secrets stay out of errors", c.name)
	}
}
