package adminhttp_test

import (
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
)

func TestServerUseAndTLS(t *testing.T) {
	t.Parallel()

	t.Run("UseWrapsRoutesMountedBeforeAndAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.server.Handle("GET /before", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
		b.server.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Wrapped", "yes")
				next.ServeHTTP(w, r)
			})
		})
		b.server.Handle("GET /after", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
		start(t, b)
		for _, path := range []string{"/before", "/after", "/healthz"} {
			resp, err := b.client.Get(b.url(path))
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, path)
			require.Equal(t, "yes", resp.Header.Get("X-Wrapped"), path)
		}
	})

	t.Run("SetTLSServesHTTPS", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		certFile, keyFile, roots := authtest.SelfSignedCert(t)
		cfg, err := auth.ServerTLS(certFile, keyFile)
		require.NoError(t, err)
		b.server.SetTLS(cfg)
		start(t, b)

		transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
		t.Cleanup(transport.CloseIdleConnections)
		resp, err := (&http.Client{Transport: transport}).Get("https://" + b.server.Addr() + "/healthz")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, 2, resp.ProtoMajor, "HTTP/2 is negotiated over TLS")

		resp, err = b.client.Get(b.url("/healthz"))
		if err == nil {
			resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plaintext is refused")
		}
	})
}
