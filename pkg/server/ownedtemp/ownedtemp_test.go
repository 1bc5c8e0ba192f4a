package ownedtemp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

const pattern = "pulse-test-"

// exitedPID is the id of a process that has exited.
func exitedPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

// owned makes dir/name naming pid its owner, as a process that made it
// with Make would have.
func owned(t *testing.T, dir, name string, pid int) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(path, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(path, OwnerFile), []byte(strconv.Itoa(pid)), 0o644))
	return path
}

func TestMakeNamesThisProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, err := Make(dir, pattern)
	require.NoError(t, err)
	require.Equal(t, dir, filepath.Dir(path))
	require.Regexp(t, "^"+pattern, filepath.Base(path))
	pid, err := ReadPID(filepath.Join(path, OwnerFile))
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), pid)

	RemoveAbandoned(dir, pattern, nil)
	require.DirExists(t, path, "a live owner's directory was swept")

	_, err = Make(filepath.Join(dir, "missing"), pattern)
	require.ErrorContains(t, err, "temp dir")
}

func TestRemoveAbandoned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exited := exitedPID(t)

	gone := owned(t, dir, pattern+"gone", exited)
	ours := owned(t, dir, pattern+"ours", os.Getpid())
	busy := owned(t, dir, pattern+"busy", exited)
	other := owned(t, dir, "other-"+pattern, exited) // not this pattern
	unnamed := filepath.Join(dir, pattern+"unnamed") // being made
	require.NoError(t, os.MkdirAll(unnamed, 0o755))
	garbled := filepath.Join(dir, pattern+"garbled")
	require.NoError(t, os.MkdirAll(garbled, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(garbled, OwnerFile), []byte("not a pid\n"), 0o644))
	kept := owned(t, dir, pattern+"kept", exited)
	require.NoError(t, Disown(kept))
	require.NoError(t, Disown(kept), "disowning twice")

	var asked []string
	RemoveAbandoned(dir, pattern, func(path string) bool {
		asked = append(asked, filepath.Base(path))
		return path == busy
	})
	require.NoDirExists(t, gone)
	for _, left := range []string{ours, busy, other, unnamed, garbled, kept} {
		require.DirExists(t, left)
	}
	require.ElementsMatch(t, []string{pattern + "gone", pattern + "busy"}, asked,
		"inUse is asked only about directories whose owner has exited")
}

func TestAlive(t *testing.T) {
	t.Parallel()
	require.True(t, Alive(os.Getpid()))
	require.True(t, Alive(1))
	require.False(t, Alive(exitedPID(t)))
	require.False(t, Alive(0))
	require.False(t, Alive(-1))
}
