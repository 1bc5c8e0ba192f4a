package pgcluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/ownedtemp"
)

// ownerEnv makes the test binary an owner process for
// TestTheServerDiesWithItsOwner: it starts a cluster, prints its port and
// root, and waits to be killed.
const ownerEnv = "PGCLUSTER_TEST_OWNER"

func TestMain(m *testing.M) {
	if os.Getenv(ownerEnv) == "1" {
		runOwner()
		return
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func runOwner() {
	c, err := Start(context.Background(), Options{Fast: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%d %s\n", c.Port(), c.root)
	select {} // until killed
}

// patience bounds every wait in these tests.
const patience = time.Minute

// reachable reports whether the server on port accepts a connection.
func reachable(ctx context.Context, port int) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port))
	if err != nil {
		return false
	}
	conn.Close(ctx)
	return true
}

// sharedTempDir is a t.TempDir the server's user can reach: the test's
// directory and its parent are private to this process's user otherwise.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	return dir
}

func TestTheServerDiesWithItsOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tmp := sharedTempDir(t)

	owner := exec.Command(os.Args[0], "-test.run=^$")
	owner.Env = append(os.Environ(), ownerEnv+"=1", "TMPDIR="+tmp)
	owner.Stderr = os.Stderr
	out, err := owner.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, owner.Start())
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })

	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the owner process did not report its cluster")
	portText, root, ok := strings.Cut(strings.TrimSpace(line), " ")
	require.True(t, ok, "owner said %q", line)
	port, err := strconv.Atoi(portText)
	require.NoError(t, err)
	require.True(t, reachable(ctx, port), "the owner's cluster does not accept connections")
	require.Equal(t, tmp, filepath.Dir(root))

	// Before the owner dies its root is not abandoned.
	removeAbandoned(tmp)
	require.DirExists(t, root)

	require.NoError(t, owner.Process.Kill()) // kill -9: the owner runs no cleanup
	_ = owner.Wait()

	require.Eventually(t, func() bool { return !reachable(ctx, port) }, patience, 50*time.Millisecond,
		"the server still accepts connections after its owner was killed")
	require.Eventually(t, func() bool {
		pid, err := ownedtemp.ReadPID(filepath.Join(root, "data", "postmaster.pid"))
		return err != nil || !ownedtemp.Alive(pid)
	}, patience, 50*time.Millisecond, "the postmaster outlived its owner")

	removeAbandoned(tmp)
	require.NoDirExists(t, root, "the next Start's sweep left the dead owner's files")
}

// TestTheSweepLeavesARootWhoseServerRuns: an owner that exited while its
// server runs on (the watcher could not stop it) leaves a root the sweep
// keeps; ownedtemp's own tests cover the rest of the sweep.
func TestTheSweepLeavesARootWhoseServerRuns(t *testing.T) {
	t.Parallel()
	tmp := sharedTempDir(t)
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	abandon := func(name string) string {
		root := filepath.Join(tmp, tempPattern+name)
		require.NoError(t, os.MkdirAll(filepath.Join(root, "data"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, ownedtemp.OwnerFile), []byte(strconv.Itoa(dead.Process.Pid)), 0o644))
		return root
	}
	serving := abandon("serving")
	require.NoError(t, os.WriteFile(filepath.Join(serving, "data", "postmaster.pid"), []byte(strconv.Itoa(os.Getpid())+"\n/data\n"), 0o644))
	gone := abandon("gone")

	removeAbandoned(tmp)
	require.DirExists(t, serving)
	require.NoDirExists(t, gone)
}

func TestCrashRestartAndStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := Start(ctx, Options{}) // durable: a crash keeps what committed
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })

	keep(t, c, 1)
	require.NoError(t, c.Crash(ctx))
	require.False(t, reachable(ctx, c.Port()), "the server accepts connections after Crash returned")

	require.NoError(t, c.Restart(ctx)) // through crash recovery
	require.NoError(t, c.Restart(ctx)) // a running server: stopped and started
	require.Equal(t, 1, kept(t, c))

	require.NoError(t, c.Stop())
	require.False(t, reachable(ctx, c.Port()))
	require.NoDirExists(t, c.root)
}

// TestAClusterStartedInABubbleLeavesNoGoroutineInIt: a test package's
// first database may be asked for from inside a testing/synctest bubble
// (pgtest starts the package's cluster then), and a bubble whose
// goroutine outlives it never ends: this test would hang until its
// timeout.
func TestAClusterStartedInABubbleLeavesNoGoroutineInIt(t *testing.T) {
	t.Parallel()
	var c *Cluster
	synctest.Test(t, func(t *testing.T) {
		var err error
		c, err = Start(t.Context(), Options{Fast: true})
		require.NoError(t, err)
	})
	require.NotNil(t, c)
	require.True(t, reachable(context.Background(), c.Port()))
	require.NoError(t, c.Stop())
}

func TestStopKeepingDataLeavesAStartableCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := sharedTempDir(t)
	c, err := Start(ctx, Options{Fast: true, Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })

	keep(t, c, 2)
	require.NoError(t, c.StopKeepingData())
	require.False(t, reachable(ctx, c.Port()))
	require.FileExists(t, filepath.Join(c.DataDir(), "PG_VERSION"))
	require.NoFileExists(t, filepath.Join(c.DataDir(), "postmaster.pid"), "a fast shutdown removes the lock file")

	require.NoError(t, c.Restart(ctx))
	require.Equal(t, 2, kept(t, c))
}

// TestKeptDataIsNotSweptAway: a cluster in a root Start made, stopped
// keeping its data (make dev -keep-data), is not a killed process's
// leftovers once its process has exited.
func TestKeptDataIsNotSweptAway(t *testing.T) {
	tmp := sharedTempDir(t)
	t.Setenv("TMPDIR", tmp) // Start's root goes under it
	c, err := Start(t.Context(), Options{Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	require.Equal(t, tmp, filepath.Dir(c.root))
	require.NoError(t, c.StopKeepingData())

	// As the next process would find it, its owner gone: whatever owner
	// the root still names is one that has exited.
	owner := filepath.Join(c.root, ownedtemp.OwnerFile)
	if _, err := os.Stat(owner); err == nil {
		dead := exec.Command("true")
		require.NoError(t, dead.Run())
		require.NoError(t, os.WriteFile(owner, []byte(strconv.Itoa(dead.Process.Pid)), 0o644))
	}
	removeAbandoned(tmp)
	require.FileExists(t, filepath.Join(c.DataDir(), "PG_VERSION"))
}

// keep commits a table kept holding n.
func keep(t *testing.T, c *Cluster, n int) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(t.Context())
	_, err = conn.Exec(t.Context(), `CREATE TABLE kept (n int)`)
	require.NoError(t, err)
	_, err = conn.Exec(t.Context(), `INSERT INTO kept VALUES ($1)`, n)
	require.NoError(t, err)
}

// kept reads back what keep committed.
func kept(t *testing.T, c *Cluster) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var n int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT n FROM kept`).Scan(&n))
	return n
}
