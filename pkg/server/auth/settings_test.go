package auth_test

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/config"
)

func TestSettings(t *testing.T) {
	t.Parallel()
	public := auth.Listener{Var: "PULSE_GRPC_ADDR", Addr: ":50052"}

	refused := func(t *testing.T, s auth.Settings, wantVar, wantMsg string, listeners ...auth.Listener) {
		t.Helper()
		sec, err := s.Load(listeners...)
		require.Nil(t, sec.Authenticator)
		var ce *config.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, wantVar, ce.Var, err.Error())
		require.Contains(t, err.Error(), wantMsg)
		require.NotContains(t, err.Error(), "hunter2", "secrets stay out of errors")
	}

	t.Run("NoCredentialsIsRefusedUnlessOpenModeIsAskedFor", func(t *testing.T) {
		t.Parallel()
		for _, mode := range []string{"", "required", " Required "} {
			refused(t, auth.Settings{Mode: mode}, auth.ModeVar,
				"no credentials are configured: set PULSE_AUTH_USERS, PULSE_AUTH_TOKENS or PULSE_AUTH_CERTS, or set PULSE_AUTH=none", public)
		}
		sec, err := auth.Settings{Mode: "none"}.Load(public)
		require.NoError(t, err)
		require.Nil(t, sec.Authenticator, "open mode")
		var logs bytes.Buffer
		sec.Warn(slog.New(slog.NewJSONHandler(&logs, nil)))
		require.Contains(t, logs.String(), `"level":"WARN"`)
		require.Contains(t, logs.String(), "AUTHENTICATION IS OFF")
		require.Contains(t, logs.String(), "PULSE_AUTH=none")
	})

	t.Run("UnknownModeNamesTheVariable", func(t *testing.T) {
		t.Parallel()
		for _, mode := range []string{"off", "false", "0", "nonee", "none\x00"} {
			refused(t, auth.Settings{Mode: mode, Tokens: "ci:operator:hunter2"}, auth.ModeVar, "is not required or none")
		}
	})

	t.Run("OpenModeWithCredentialsIsAContradiction", func(t *testing.T) {
		t.Parallel()
		refused(t, auth.Settings{Mode: "none", Users: "ann:producer:hunter2"}, auth.UsersVar, "PULSE_AUTH=none")
		refused(t, auth.Settings{Mode: "none", Tokens: "ci:operator:hunter2"}, auth.TokensVar, "PULSE_AUTH=none")
		refused(t, auth.Settings{Mode: "none", Certs: "wk:worker"}, auth.CertsVar, "PULSE_AUTH=none")
	})

	t.Run("PlaintextCredentialsBeyondLoopbackAreRefused", func(t *testing.T) {
		t.Parallel()
		for _, addr := range []string{":8080", "0.0.0.0:8080", "[::]:8080", "10.0.0.5:8080", "pulse.internal:8080", "localhost.evil.example:1", "not-an-address"} {
			l := auth.Listener{Var: "PULSE_HTTP_ADDR", Addr: addr}
			refused(t, auth.Settings{Users: "ann:producer:hunter2"}, auth.AllowPlaintextCredentialsVar, "PULSE_HTTP_ADDR", l)
			refused(t, auth.Settings{Tokens: "ci:operator:hunter2"}, auth.AllowPlaintextCredentialsVar, "set PULSE_ALLOW_PLAINTEXT_CREDENTIALS=true", l)
		}
		// Every listener is checked, not only the first.
		refused(t, auth.Settings{Tokens: "ci:operator:hunter2"}, auth.AllowPlaintextCredentialsVar, `PULSE_GRPC_ADDR=":50051"`,
			auth.Listener{Var: "PULSE_HTTP_ADDR", Addr: "127.0.0.1:8080"}, auth.Listener{Var: "PULSE_GRPC_ADDR", Addr: ":50051"})
	})

	t.Run("PlaintextCredentialsOnLoopbackStart", func(t *testing.T) {
		t.Parallel()
		for _, addr := range []string{"127.0.0.1:0", "127.9.9.9:1", "[::1]:8080", "localhost:8080", "LOCALHOST:1"} {
			sec, err := auth.Settings{Tokens: "ci:operator:hunter2"}.Load(auth.Listener{Var: "PULSE_GRPC_ADDR", Addr: addr})
			require.NoError(t, err, addr)
			require.NotNil(t, sec.Authenticator)
			var logs bytes.Buffer
			sec.Warn(slog.New(slog.NewJSONHandler(&logs, nil)))
			require.Empty(t, logs.String(), "nothing to warn about on loopback")
		}
	})

	t.Run("PlaintextCredentialsBeyondLoopbackStartWhenAllowedAndSaySo", func(t *testing.T) {
		t.Parallel()
		sec, err := auth.Settings{Tokens: "ci:operator:hunter2", AllowPlaintextCredentials: true}.Load(public)
		require.NoError(t, err)
		require.NotNil(t, sec.Authenticator)
		var logs bytes.Buffer
		sec.Warn(slog.New(slog.NewJSONHandler(&logs, nil)))
		require.Contains(t, logs.String(), `"level":"WARN"`)
		require.Contains(t, logs.String(), "CREDENTIALS TRAVEL IN PLAINTEXT")
		require.Contains(t, logs.String(), "PULSE_ALLOW_PLAINTEXT_CREDENTIALS=true")
		require.NotContains(t, logs.String(), "hunter2")
	})

	t.Run("APlaintextListenerOfATLSServiceIsCheckedToo", func(t *testing.T) {
		t.Parallel()
		cert, key, _ := authtest.SelfSignedCert(t)
		s := auth.Settings{Tokens: "ci:operator:hunter2", TLSCert: cert, TLSKey: key}
		admin := auth.Listener{Var: "PULSE_ADMIN_ADDR", Addr: ":9101", Plaintext: true}
		refused(t, s, auth.AllowPlaintextCredentialsVar, `PULSE_ADMIN_ADDR=":9101"`, public, admin)
		_, err := s.Load(public, auth.Listener{Var: "PULSE_ADMIN_ADDR", Addr: "127.0.0.1:9101", Plaintext: true})
		require.NoError(t, err, "loopback")
		s.AllowPlaintextCredentials = true
		_, err = s.Load(public, admin)
		require.NoError(t, err)
	})

	t.Run("CredentialsOverTLSNeedNoOptIn", func(t *testing.T) {
		t.Parallel()
		cert, key, _ := authtest.SelfSignedCert(t)
		sec, err := auth.Settings{Users: "ann:producer:pw", TLSCert: cert, TLSKey: key}.Load(public)
		require.NoError(t, err)
		require.NotNil(t, sec.Authenticator)
		require.NotNil(t, sec.TLS)
		require.Equal(t, tls.NoClientCert, sec.TLS.ClientAuth)
		require.Same(t, sec.TLS, sec.HTTPTLS(), "nothing to relax without a client CA")
	})

	t.Run("ClientCARequiresCertificatesOnGRPCAndVerifiesThemOnHTTP", func(t *testing.T) {
		t.Parallel()
		ca := authtest.NewCA(t, "pulse test CA")
		cert, key := ca.Issue(t, "localhost")
		sec, err := auth.Settings{Certs: "wk:worker", TLSCert: cert, TLSKey: key, TLSClientCA: ca.File}.Load(public)
		require.NoError(t, err)
		require.NotNil(t, sec.Authenticator, "certificate identities alone are credentials")
		require.Equal(t, tls.RequireAndVerifyClientCert, sec.TLS.ClientAuth)
		require.NotNil(t, sec.TLS.ClientCAs)
		require.Equal(t, tls.VerifyClientCertIfGiven, sec.HTTPTLS().ClientAuth)
		require.Equal(t, tls.RequireAndVerifyClientCert, sec.TLS.ClientAuth, "HTTPTLS copies, it does not change the gRPC config")
	})

	t.Run("ClientCAAndCertIdentitiesAreChecked", func(t *testing.T) {
		t.Parallel()
		ca := authtest.NewCA(t, "pulse test CA")
		cert, key := ca.Issue(t, "localhost")
		refused(t, auth.Settings{Mode: "none", TLSClientCA: ca.File}, auth.TLSClientCAVar, "PULSE_TLS_CERT and PULSE_TLS_KEY are not")
		refused(t, auth.Settings{Certs: "wk:worker", TLSCert: cert, TLSKey: key}, auth.CertsVar, "PULSE_TLS_CLIENT_CA is not")
		refused(t, auth.Settings{Certs: "wk:worker", TLSCert: cert, TLSKey: key, TLSClientCA: "/nonexistent/ca.pem"}, auth.TLSClientCAVar, "/nonexistent/ca.pem")
		refused(t, auth.Settings{Certs: "wk:worker", TLSCert: cert, TLSKey: key, TLSClientCA: key}, auth.TLSClientCAVar, "holds no PEM certificate")
		withCA := auth.Settings{TLSCert: cert, TLSKey: key, TLSClientCA: ca.File}
		for spec, want := range map[string]string{
			"wk":                    "entry 1 is not name:role",
			"wk:worker,":            "entry 2 is not name:role",
			"wk:admin":              `entry 1 (wk): role "admin"`,
			"a/b:worker":            "entry 1: the name must be",
			"wk:worker,wk:operator": "entry 2: wk is listed twice",
			"wk:worker:extra":       `role "worker:extra"`,
			"\x00:worker":           "entry 1: the name must be",
			"wk:worker, :":          "entry 2: the name must be",
			"wk:worker,,b:ops":      "entry 2 is not name:role",
			"ünïcode:worker":        "entry 1: the name must be",
			"wk:worker\x00":         "role",
			" wk : worker ":         "entry 1: the name must be",
			"wk:producer,x:xyz":     `entry 2 (x): role "xyz"`,
		} {
			s := withCA
			s.Certs = spec
			refused(t, s, auth.CertsVar, want)
		}
		// Open mode behind mTLS: the handshake is the only gate.
		s := withCA
		s.Mode = "none"
		sec, err := s.Load(public)
		require.NoError(t, err)
		require.Nil(t, sec.Authenticator)
		require.Equal(t, tls.RequireAndVerifyClientCert, sec.TLS.ClientAuth)
	})
}
