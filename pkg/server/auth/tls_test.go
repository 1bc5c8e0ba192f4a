package auth_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/config"
)

func TestServerTLS(t *testing.T) {
	t.Parallel()

	t.Run("BothEmptyIsPlaintext", func(t *testing.T) {
		t.Parallel()
		cfg, err := auth.ServerTLS("", "")
		require.NoError(t, err)
		require.Nil(t, cfg)
		require.Empty(t, auth.GRPCServerOptions(nil))
	})

	t.Run("LoadsAKeypair", func(t *testing.T) {
		t.Parallel()
		cert, key, _ := authtest.SelfSignedCert(t)
		cfg, err := auth.ServerTLS(cert, key)
		require.NoError(t, err)
		require.Len(t, cfg.Certificates, 1)
		require.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion)
		require.Len(t, auth.GRPCServerOptions(cfg), 1)
	})

	t.Run("HalfAKeypairNamesTheMissingVariable", func(t *testing.T) {
		t.Parallel()
		cert, key, _ := authtest.SelfSignedCert(t)
		for missing, args := range map[string][2]string{
			auth.TLSKeyVar:  {cert, ""},
			auth.TLSCertVar: {"", key},
		} {
			cfg, err := auth.ServerTLS(args[0], args[1])
			require.Nil(t, cfg)
			var ce *config.Error
			require.ErrorAs(t, err, &ce)
			require.Equal(t, missing, ce.Var)
			require.Contains(t, err.Error(), "half a keypair")
		}
	})

	t.Run("UnreadableOrMismatchedFilesFail", func(t *testing.T) {
		t.Parallel()
		cert, key, _ := authtest.SelfSignedCert(t)
		otherCert, _, _ := authtest.SelfSignedCert(t)
		garbage := filepath.Join(t.TempDir(), "garbage.pem")
		require.NoError(t, os.WriteFile(garbage, []byte("not pem"), 0o600))
		for name, args := range map[string][2]string{
			"MissingFile":    {filepath.Join(t.TempDir(), "nope.pem"), key},
			"Garbage":        {cert, garbage},
			"KeyOfOtherCert": {otherCert, key},
		} {
			_, err := auth.ServerTLS(args[0], args[1])
			var ce *config.Error
			require.ErrorAs(t, err, &ce, name)
			require.Equal(t, auth.TLSCertVar, ce.Var, name)
		}
	})
}
