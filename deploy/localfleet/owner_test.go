package localfleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/ownedtemp"
)

// ownerEnv makes the test binary the owner of a fleet for
// TestAKilledOwnersFleetLeavesNothing: it brings a fleet Up with the
// binaries named in ownerBinsEnv, prints ownerReport, and waits to be
// killed.
const (
	ownerEnv     = "LOCALFLEET_TEST_OWNER"
	ownerBinsEnv = "LOCALFLEET_TEST_OWNER_BINARIES"
)

// ownerReport is what the owner process prints once its fleet is up.
type ownerReport struct {
	WorkDir string         `json:"work_dir"`
	Paths   []string       `json:"paths"`
	PIDs    map[string]int `json:"pids"`
}

func TestMain(m *testing.M) {
	if os.Getenv(ownerEnv) == "1" {
		if err := runOwner(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

func runOwner() error {
	var bins map[string]string
	if err := json.Unmarshal([]byte(os.Getenv(ownerBinsEnv)), &bins); err != nil {
		return err
	}
	f, err := Up(context.Background(), Options{
		Gateways: 1,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Binaries: bins,
	})
	if err != nil {
		return err
	}
	if err := json.NewEncoder(os.Stdout).Encode(ownerReport{WorkDir: f.WorkDir, Paths: f.Paths(), PIDs: f.PIDs()}); err != nil {
		return err
	}
	select {} // until killed
}

// TestAKilledOwnersFleetLeavesNothing: a process killed with SIGKILL runs
// none of its cleanup, yet its services and Postgres stop with it, and the
// next fleet's start removes its work directory.
func TestAKilledOwnersFleetLeavesNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("brings up a fleet of its own in a second process; make test-long runs it")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root, err := FindRepoRoot(".")
	require.NoError(t, err)
	binsJSON, err := json.Marshal(buildServices(ctx, t))
	require.NoError(t, err)

	// The owner's temporary files go here; Postgres's user must reach it.
	tmp := t.TempDir()
	require.NoError(t, os.Chmod(tmp, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(tmp), 0o755))

	owner := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	owner.Dir = root
	owner.Env = append(os.Environ(), ownerEnv+"=1", ownerBinsEnv+"="+string(binsJSON), "TMPDIR="+tmp)
	owner.Stderr = os.Stderr
	out, err := owner.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, owner.Start())
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the owner did not report its fleet")
	var report ownerReport
	require.NoError(t, json.Unmarshal([]byte(line), &report))

	require.Equal(t, tmp, filepath.Dir(report.WorkDir))
	require.True(t, strings.HasPrefix(filepath.Base(report.WorkDir), workDirPattern), report.WorkDir)
	require.Contains(t, report.PIDs, ControlAPI)
	require.Contains(t, report.PIDs, "postgres")
	ownedtemp.RemoveAbandoned(tmp, workDirPattern, nil)
	require.DirExists(t, report.WorkDir, "a running fleet's work directory was swept")

	require.NoError(t, owner.Process.Kill()) // kill -9: no Down runs
	_ = owner.Wait()
	for name, pid := range report.PIDs {
		require.Eventually(t, func() bool { return !ProcessAlive(pid) }, time.Minute, 50*time.Millisecond,
			"%s (pid %d) outlived the fleet's owner", name, pid)
	}
	for _, p := range report.Paths {
		require.DirExists(t, p, "nothing removes files before the next start")
	}
	ownedtemp.RemoveAbandoned(tmp, workDirPattern, nil) // as the next Up does
	require.NoDirExists(t, report.WorkDir, "the killed owner's work directory was left")
}
