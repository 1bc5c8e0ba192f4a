package localfleet

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProcess(t *testing.T) {
	t.Parallel()

	start := func(t *testing.T, script string) *Process {
		t.Helper()
		p, err := Start(t.Context(), "sh", "/bin/sh", []string{"GREETING=hello"}, t.TempDir(), "-c", script)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Kill(); _ = p.Wait(5 * time.Second) })
		return p
	}

	t.Run("CapturesStdoutAndStderrInFileAndTail", func(t *testing.T) {
		t.Parallel()
		p := start(t, `echo "$GREETING out"; echo err >&2`)
		require.NoError(t, p.Wait(10*time.Second))
		require.Contains(t, p.Logs(), "hello out")
		require.Contains(t, p.Logs(), "err")
		b, err := os.ReadFile(p.LogPath)
		require.NoError(t, err)
		require.Equal(t, p.Logs(), string(b))
		require.Equal(t, "sh.log", filepath.Base(p.LogPath))
	})

	t.Run("StopsOnSignalAndReportsTimeouts", func(t *testing.T) {
		t.Parallel()
		p := start(t, `trap 'echo bye; exit 0' TERM; while :; do sleep 0.05; done`)
		require.Error(t, p.Wait(200*time.Millisecond), "still running")
		require.True(t, ProcessAlive(p.PID()))
		require.NoError(t, p.Signal(syscall.SIGTERM))
		require.NoError(t, p.Wait(10*time.Second))
		require.Contains(t, p.Logs(), "bye")
		require.False(t, ProcessAlive(p.PID()))
		require.NoError(t, p.Signal(syscall.SIGTERM), "signalling an exited process is not an error")
	})

	t.Run("ReportsNonZeroExit", func(t *testing.T) {
		t.Parallel()
		p := start(t, `exit 3`)
		err := p.Wait(10 * time.Second)
		require.ErrorContains(t, err, "exit status 3")
	})

	t.Run("TailKeepsTheMostRecentOutput", func(t *testing.T) {
		t.Parallel()
		tb := &tailBuffer{max: 8}
		tb.Write([]byte("0123456789"))
		tb.Write([]byte("ab"))
		require.Equal(t, "456789ab", tb.String())
	})
}

func TestFindRepoRoot(t *testing.T) {
	t.Parallel()
	root, err := FindRepoRoot(".")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.work"))
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "deploy", "localfleet"), wd)
}
