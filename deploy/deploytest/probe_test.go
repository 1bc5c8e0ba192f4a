package deploytest

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProbe proves pulse-probe, the healthcheck of every image, exits 0
// only for a 200 answer: a failing /readyz, a refused connection and a
// missing URL all fail the check.
func TestProbe(t *testing.T) {
	t.Parallel()
	bin := binary(t, probeName)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusOK)
		default:
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "http://" + l.Addr().String() + "/readyz"
	require.NoError(t, l.Close())

	exitCode := func(args ...string) int {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		require.NoError(t, err, "%s", out)
		return 0
	}
	require.Equal(t, 0, exitCode(srv.URL+"/readyz"), "200 is healthy")
	require.Equal(t, 1, exitCode(srv.URL+"/unready"), "503 is unhealthy")
	require.Equal(t, 1, exitCode(refused), "a refused connection is unhealthy")
	require.Equal(t, 2, exitCode(), "no URL is a usage error")
}
