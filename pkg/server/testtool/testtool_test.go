package testtool_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/testtool"
)

// recorder is a testing.TB that records how Require ended.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = strings.TrimSpace(fmtArgs(args)); panic(r) }
func (r *recorder) Fatal(args ...any) { r.failed = strings.TrimSpace(fmtArgs(args)); panic(r) }

func fmtArgs(args []any) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString(a.(string))
	}
	return b.String()
}

func call(tb testing.TB, tool testtool.Tool) (r *recorder, path string) {
	r = &recorder{TB: tb}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
	}()
	return r, testtool.Require(r, tool)
}

var missing = testtool.Tool{Name: "nosuchtool", Programs: []string{"pulse-no-such-program"}, Install: "apt-get install -y nosuchtool"}

func TestRequire(t *testing.T) {
	t.Run("FindsAProgramOnPath", func(t *testing.T) {
		sh, err := exec.LookPath("sh")
		require.NoError(t, err)
		_, p := call(t, testtool.Tool{Name: "sh", Programs: []string{"pulse-no-such-program", "sh"}})
		require.Equal(t, sh, p)
	})
	t.Run("FailsSayingHowToInstallIt", func(t *testing.T) {
		t.Setenv("CI", "")
		t.Setenv(testtool.EnvSkip, "")
		r, _ := call(t, missing)
		require.Empty(t, r.skipped)
		require.Contains(t, r.failed, "apt-get install -y nosuchtool")
		require.Contains(t, r.failed, testtool.EnvSkip+"=nosuchtool")
	})
	t.Run("SkipsOnlyWhenTheDeveloperOptedOut", func(t *testing.T) {
		t.Setenv("CI", "")
		t.Setenv(testtool.EnvSkip, "chromium,nosuchtool")
		r, _ := call(t, missing)
		require.Empty(t, r.failed)
		require.Contains(t, r.skipped, testtool.EnvSkip)
	})
	t.Run("CIIgnoresTheOptOut", func(t *testing.T) {
		t.Setenv("CI", "true")
		t.Setenv(testtool.EnvSkip, "nosuchtool")
		r, _ := call(t, missing)
		require.Empty(t, r.skipped)
		require.Contains(t, r.failed, "apt-get install -y nosuchtool")
		require.NotContains(t, r.failed, testtool.EnvSkip+"=")
	})
}
