package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
)

// mtlsServer serves Middleware over TLS configured by Settings.Load with a
// client CA, echoing the identity each request was admitted as.
func mtlsServer(t *testing.T, ca *authtest.CA, s auth.Settings) *httptest.Server {
	t.Helper()
	cert, key := ca.Issue(t, "localhost")
	s.TLSCert, s.TLSKey, s.TLSClientCA = cert, key, ca.File
	sec, err := s.Load(auth.Listener{Var: "PULSE_HTTP_ADDR", Addr: "127.0.0.1:0"})
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(auth.Middleware(sec.Authenticator, auth.HTTPPolicy(httpPolicy))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := auth.IdentityFrom(r.Context())
			_, _ = io.WriteString(w, id.Name+"/"+string(id.Role))
		})))
	srv.TLS = sec.HTTPTLS()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// client returns an HTTPS client trusting ca and presenting the keypair
// files, if any.
func mtlsClient(t *testing.T, roots *x509.CertPool, certFile, keyFile string) *http.Client {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		require.NoError(t, err)
		// Sent whatever CAs the server asks for, so the server's own
		// verification is what is tested (Go's client would otherwise
		// withhold a certificate of a CA the server did not name).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

func get(t *testing.T, c *http.Client, url, header string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if header != "" {
		req.Header.Set("Authorization", header)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestCertIdentityOverHTTP(t *testing.T) {
	t.Parallel()
	ca := authtest.NewCA(t, "pulse test CA")
	srv := mtlsServer(t, ca, auth.Settings{Users: "ann:operator:ann-pw", Certs: "prod-1:producer,ops-1:operator"})
	job := srv.URL + "/v1/jobs/1"

	t.Run("AMappedCertificateIsItsIdentity", func(t *testing.T) {
		t.Parallel()
		cert, key := ca.Issue(t, "prod-1")
		code, body, err := get(t, mtlsClient(t, ca.Pool, cert, key), job, "")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "prod-1/producer", body)
	})

	t.Run("TheRoleComesFromTheMappingNotTheCertificate", func(t *testing.T) {
		t.Parallel()
		cert, key := ca.Issue(t, "prod-1")
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/jobs/1/cancel", nil)
		require.NoError(t, err)
		resp, err := mtlsClient(t, ca.Pool, cert, key).Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "a producer's certificate may not cancel")
	})

	t.Run("AnUnmappedCertificateIsUnauthenticated", func(t *testing.T) {
		t.Parallel()
		cert, key := ca.Issue(t, "mallory")
		code, body, err := get(t, mtlsClient(t, ca.Pool, cert, key), job, "")
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, code)
		require.Contains(t, body, "PULSE_AUTH_CERTS")
	})

	t.Run("ACertificateOfAnotherCAFailsTheHandshake", func(t *testing.T) {
		t.Parallel()
		other := authtest.NewCA(t, "other CA")
		cert, key := other.Issue(t, "prod-1")
		_, _, err := get(t, mtlsClient(t, ca.Pool, cert, key), job, "")
		require.Error(t, err, "the server verifies every certificate presented")
	})

	t.Run("NoCertificateStillReachesPublicRoutesAndNeedsCredentialsElsewhere", func(t *testing.T) {
		t.Parallel()
		c := mtlsClient(t, ca.Pool, "", "")
		code, _, err := get(t, c, srv.URL+"/healthz", "")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, "a kubelet probe presents no certificate")
		code, _, err = get(t, c, job, "")
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, code)
		code, body, err := get(t, c, job, authtest.Basic("ann", "ann-pw"))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "ann/operator", body)
	})

	t.Run("AnAuthorizationHeaderDecidesOverTheCertificate", func(t *testing.T) {
		t.Parallel()
		cert, key := ca.Issue(t, "ops-1")
		code, _, err := get(t, mtlsClient(t, ca.Pool, cert, key), job, authtest.Basic("ann", "wrong"))
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, code, "bad credentials are not rescued by a good certificate")
	})
}

// withPeerCert is the context gRPC gives a handler on a connection whose
// handshake verified a client certificate named cn.
func withPeerCert(ctx context.Context, cn string) context.Context {
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	return peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}, AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{
		VerifiedChains: [][]*x509.Certificate{{leaf}},
	}}})
}

func TestCertIdentityOverGRPC(t *testing.T) {
	t.Parallel()
	ca := authtest.NewCA(t, "pulse test CA")
	cert, key := ca.Issue(t, "localhost")
	sec, err := auth.Settings{Certs: "wk-1:worker,prod-1:producer", TLSCert: cert, TLSKey: key, TLSClientCA: ca.File}.
		Load(auth.Listener{Var: "PULSE_GRPC_ADDR", Addr: ":0"})
	require.NoError(t, err)
	a := sec.Authenticator

	// call runs the tap handle as the server does, with header (if any) as
	// the call's authorization metadata.
	call := func(ctx context.Context, method, header string) (auth.Identity, codes.Code, string) {
		md := metadata.MD{}
		if header != "" {
			md = metadata.Pairs("authorization", header)
		}
		ctx, err := auth.TapHandle(a, grpcPolicy)(ctx, &tap.Info{FullMethodName: method, Header: md})
		if err != nil {
			return auth.Identity{}, status.Code(err), status.Convert(err).Message()
		}
		return auth.IdentityFrom(ctx), codes.OK, ""
	}

	id, code, _ := call(withPeerCert(t.Context(), "wk-1"), streamMethod, "")
	require.Equal(t, codes.OK, code)
	require.Equal(t, auth.Identity{Name: "wk-1", Role: auth.RoleWorker}, id)
	require.Equal(t, "wk-1/w", auth.LeaseHolder(id.Name, "w"), "a certificate identity holds leases like any other")

	_, code, msg := call(withPeerCert(t.Context(), "wk-1"), cancelMethod, "")
	require.Equal(t, codes.PermissionDenied, code, msg)

	_, code, msg = call(withPeerCert(t.Context(), "wk-2"), streamMethod, "")
	require.Equal(t, codes.Unauthenticated, code)
	require.Contains(t, msg, "PULSE_AUTH_CERTS")

	// A name that only differs by case, or carries a slash, is not a match.
	for _, cn := range []string{"WK-1", "wk-1/evil", "wk-1\x00", "", "wk-1 ", "\xffwk-1", strings.Repeat("wk-1", 10000)} {
		_, code, _ = call(withPeerCert(t.Context(), cn), streamMethod, "")
		require.Equal(t, codes.Unauthenticated, code, "%q", cn)
	}

	_, code, _ = call(t.Context(), streamMethod, "")
	require.Equal(t, codes.Unauthenticated, code, "no certificate, no header")

	// A header decides when present, even on a certificate's connection.
	_, code, _ = call(withPeerCert(t.Context(), "wk-1"), streamMethod, authtest.Bearer("forged"))
	require.Equal(t, codes.Unauthenticated, code)

	// Many refused certificates never lock out the name: a verified
	// certificate is not a guess, and the failed-attempt limits count
	// guesses.
	for range 50 {
		_, code, _ = call(withPeerCert(t.Context(), "mallory"), streamMethod, "")
		require.Equal(t, codes.Unauthenticated, code)
	}
	_, code, _ = call(withPeerCert(t.Context(), "wk-1"), streamMethod, "")
	require.Equal(t, codes.OK, code)
}
