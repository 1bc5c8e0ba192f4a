package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The CLI refuses to send credentials over plain http beyond loopback
// before any request, the rule the services apply to their listeners.
// (The CLI over TLS and mTLS against the real services: e2e/tls_test.go.)
func TestPlaintextCredentialsAreRefusedBeyondLoopback(t *testing.T) {
	t.Parallel()
	// pulse.invalid never resolves (RFC 6761), so a request that got past
	// the check fails with exit 1, "cannot reach".
	remote := "http://pulse.invalid:8080"
	for _, creds := range [][]string{{"--user", "ops", "--password", "secret"}, {"--token", "tkn"}} {
		args := append([]string{"--server", remote}, creds...)
		r := pulse(t, "", append(args, "jobs", "list")...)
		require.Equal(t, ExitUsage, r.code, "refused before any request")
		line := failLine(t, r)
		require.Contains(t, line, "refusing to send credentials over plain http to pulse.invalid:8080")
		require.Contains(t, line, "--allow-plaintext-credentials")
		require.NotContains(t, line, "secret")
		require.NotContains(t, line, "tkn")

		r = pulse(t, "", append(args, "--allow-plaintext-credentials", "jobs", "list")...)
		require.Equal(t, ExitError, r.code)
		require.Contains(t, failLine(t, r), "cannot reach", "the opt-in lets the request go")
	}
	// No credentials: nothing to protect, the request goes.
	r := pulse(t, "", "--server", remote, "jobs", "list")
	require.Contains(t, failLine(t, r), "cannot reach")
	// Loopback: allowed (the local fleet).
	r = pulse(t, "", "--server", "http://127.0.0.1:1", "--user", "ops", "--password", "x", "jobs", "list")
	require.Contains(t, failLine(t, r), "cannot reach")
	r = pulse(t, "", "--server", "http://localhost:1", "--token", "x", "jobs", "list")
	require.Contains(t, failLine(t, r), "cannot reach")
	// https: allowed whatever the host.
	r = pulse(t, "", "--server", "https://pulse.invalid:8443", "--token", "x", "jobs", "list")
	require.Contains(t, failLine(t, r), "cannot reach")
}

func TestTLSFlagsAreChecked(t *testing.T) {
	t.Parallel()
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not pem"), 0o600))
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"MissingCA":      {[]string{"--ca-file", filepath.Join(t.TempDir(), "nope.pem")}, "--ca-file"},
		"GarbageCA":      {[]string{"--ca-file", garbage}, "holds no PEM certificate"},
		"CertAlone":      {[]string{"--client-cert", garbage}, "--client-cert and --client-key go together"},
		"KeyAlone":       {[]string{"--client-key", garbage}, "--client-cert and --client-key go together"},
		"GarbageKeyPair": {[]string{"--client-cert", garbage, "--client-key", garbage}, "--client-cert"},
	} {
		r := pulse(t, "", append([]string{"--server", "https://pulse.invalid:8443"}, append(c.args, "jobs", "list")...)...)
		require.Equal(t, ExitUsage, r.code, name)
		require.Contains(t, failLine(t, r), c.want, name)
	}
}
