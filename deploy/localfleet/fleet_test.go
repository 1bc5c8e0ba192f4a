package localfleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/ownedtemp"
)

// buildServices builds control-api and the gateway for a test's fleet
// (Options.Binaries); Up builds the other commands itself.
func buildServices(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	root, err := FindRepoRoot(".")
	require.NoError(t, err)
	bins, err := Build(ctx, root, t.TempDir(), ControlAPI, DispatchGateway)
	require.NoError(t, err, "build the services")
	return bins
}

func TestUp(t *testing.T) {
	t.Parallel()

	t.Run("StartsServicesAndDownLeavesNothingBehind", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		prebuilt := buildServices(ctx, t)

		f, err := Up(ctx, Options{
			Gateways:  1,
			Reaper:    true, // skipped with a log line while services/reaper has no main.go
			Scheduler: true,
			Env:       map[string]string{"PULSE_LOG_LEVEL": "debug"},
			Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
			Binaries:  prebuilt, // the other commands Up builds itself
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Down() })
		wantBin := map[string]string{ControlAPI: prebuilt[ControlAPI], "dispatch-gateway-1": prebuilt[DispatchGateway]}
		for _, p := range f.Processes {
			if want, ok := wantBin[p.Name]; ok {
				require.Equal(t, want, p.Cmd.Path, "%s runs the prebuilt binary", p.Name)
			}
		}

		require.Len(t, f.GatewayAddrs, 1)
		require.NotNil(t, f.Cluster)
		require.Contains(t, f.AdminURLs, ControlAPI)
		require.Contains(t, f.AdminURLs, "dispatch-gateway-1")
		for name, base := range f.AdminURLs {
			resp, err := http.Get(base + "/metrics")
			require.NoError(t, err, name)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, name)
		}
		pids, paths := f.PIDs(), f.Paths()
		require.Contains(t, pids, "postgres")

		require.NoError(t, f.Down(), "every service should exit 0 on SIGTERM")
		for name, pid := range pids {
			require.Eventually(t, func() bool { return !ProcessAlive(pid) }, 5*time.Second, 50*time.Millisecond, "%s still running", name)
		}
		for _, p := range paths {
			require.NoDirExists(t, p)
		}
	})

	t.Run("KeepDataLeavesFilesNoSweepTakes", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("a second fleet beside the first; make test-long runs it")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		prebuilt := buildServices(ctx, t)

		f, err := Up(ctx, Options{
			Gateways: 1,
			KeepData: true,
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			Binaries: prebuilt,
		})
		require.NoError(t, err)
		paths := f.Paths()
		t.Cleanup(func() {
			for _, p := range paths {
				_ = os.RemoveAll(p)
			}
		})
		require.NoError(t, f.Down())
		// What the next fleet's start sweeps: nothing kept is taken.
		ownedtemp.RemoveAbandoned("", workDirPattern, nil)
		for _, p := range paths {
			require.DirExists(t, p)
			require.NoFileExists(t, filepath.Join(p, ownedtemp.OwnerFile), "kept files still name an owner")
		}
		require.FileExists(t, filepath.Join(f.Cluster.DataDir(), "PG_VERSION"))
		require.DirExists(t, f.LogDir)
	})

	t.Run("FailsCleanlyWhenADatabaseIsUnreachable", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		port, err := FreePort()
		require.NoError(t, err)
		workDir := t.TempDir()

		_, err = Up(ctx, Options{
			WorkDir:     workDir,
			DatabaseURL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=1", port),
			Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		require.ErrorContains(t, err, "control-api migrate")
		require.NoDirExists(t, workDir+"/bin")
		require.NoDirExists(t, workDir+"/logs")
	})
}
