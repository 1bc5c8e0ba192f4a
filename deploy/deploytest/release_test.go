package deploytest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// releaseVersion is the version the release tests cut, one no real
// release will have.
const releaseVersion = "v0.98.7"

// releaseBinaries are what every platform's archive carries.
var releaseBinaries = []string{"pulse", "control-api", "dispatch-gateway", "reaper", "scheduler"}

// TestRelease runs scripts/release.sh (make release) in a copy of the
// working tree committed to a throwaway git repository: its refusals,
// then a dry run, which must build and checksum the archive with every
// binary reporting the version and leave the repository exactly as it
// was, then the release itself, which must commit the requirements and
// tag every module. Only the native platform is built; Docker is not
// used (IMAGES=0, which the script must say it skipped).
func TestRelease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("rehearses a release: builds every binary twice (about 90 s on two cores); make test-long runs it")
	}
	for _, tool := range []string{"git", "tar", "gzip", "sha256sum"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "make release needs %s", tool)
	}
	repo := releaseRepo(t)
	native := runtime.GOOS + "/" + runtime.GOARCH
	env := []string{"PLATFORMS=" + native, "IMAGES=0"}
	head := git(t, repo, "rev-parse", "HEAD")

	t.Run("Refusals", func(t *testing.T) {
		out, err := release(t, repo, append(env, "VERSION=1.2"))
		require.Error(t, err)
		require.Contains(t, out, "VERSION must be a semantic version like v1.2.3 (got '1.2')")

		out, err = release(t, repo, append(env, "VERSION=v2.0.0"))
		require.Error(t, err)
		require.Contains(t, out, "a major version past v1 needs /vN module paths")

		out, err = release(t, repo, append(env, "VERSION=v0.99.0"))
		require.Error(t, err)
		require.Contains(t, out, "CHANGELOG.md has no section for v0.99.0")

		require.NoError(t, os.WriteFile(filepath.Join(repo, "stray.txt"), []byte("x"), 0o644))
		out, err = release(t, repo, append(env, "VERSION="+releaseVersion))
		require.Error(t, err)
		require.Contains(t, out, "the tree is not clean")
		require.Contains(t, out, "stray.txt")
		require.NoError(t, os.Remove(filepath.Join(repo, "stray.txt")))
		require.NoDirExists(t, filepath.Join(repo, "dist"), "a refused release builds nothing")
	})

	t.Run("DryRun", func(t *testing.T) {
		gomod := readFile(t, filepath.Join(repo, "pkg/server/go.mod"))
		out, err := release(t, repo, append(env, "VERSION="+releaseVersion, "DRY_RUN=1"))
		require.NoError(t, err, out)
		require.Contains(t, out, "dry run of "+releaseVersion)
		require.Contains(t, out, "skipping the images (IMAGES=0)")
		require.Contains(t, out, "would commit the requirements at "+releaseVersion)

		archive := checkDist(t, repo, native)
		for _, b := range releaseBinaries {
			bin := filepath.Join(t.TempDir(), b)
			require.NoError(t, os.WriteFile(bin, archive[b], 0o755))
			v, err := exec.Command(bin, "--version").Output()
			require.NoError(t, err, "%s --version", b)
			require.Equal(t, b+" "+releaseVersion+"\n", string(v), "%s --version", b)
		}

		require.Equal(t, head, git(t, repo, "rev-parse", "HEAD"), "a dry run commits nothing")
		require.Empty(t, git(t, repo, "tag", "--list"), "a dry run tags nothing")
		require.Empty(t, git(t, repo, "status", "--porcelain"), "a dry run leaves the tree as it was")
		require.Equal(t, gomod, readFile(t, filepath.Join(repo, "pkg/server/go.mod")))
	})

	t.Run("Release", func(t *testing.T) {
		out, err := release(t, repo, append(env, "VERSION="+releaseVersion))
		require.NoError(t, err, out)
		checkDist(t, repo, native)

		require.Equal(t, "release: "+releaseVersion, git(t, repo, "log", "-1", "--format=%s"))
		require.Equal(t, head, git(t, repo, "rev-parse", "HEAD~1"))
		require.Empty(t, git(t, repo, "status", "--porcelain"))
		require.Contains(t, readFile(t, filepath.Join(repo, "pkg/server/go.mod")),
			"github.com/pulsequeue/pulse/pkg "+releaseVersion+"\n")
		require.Contains(t, readFile(t, filepath.Join(repo, "go.work")),
			"github.com/pulsequeue/pulse/pkg "+releaseVersion+" => ./pkg\n")

		tags := strings.Fields(git(t, repo, "tag", "--list"))
		mods := strings.Fields(git(t, repo, "ls-files", "*/go.mod"))
		for _, want := range []string{"pkg", "pkg/pulsetx", "pkg/server", "migrations", "cli",
			"services/control-api", "services/dispatch-gateway", "services/reaper", "services/scheduler"} {
			require.Contains(t, tags, want+"/"+releaseVersion)
		}
		for _, tag := range tags {
			dir := strings.TrimSuffix(tag, "/"+releaseVersion)
			require.Contains(t, mods, dir+"/go.mod", "tag %s names a module directory", tag)
			require.Equal(t, git(t, repo, "rev-parse", "HEAD"), git(t, repo, "rev-list", "-n", "1", tag), "tag %s is the release commit", tag)
		}
		require.NotContains(t, tags, releaseVersion, "no root module, no bare tag")
		require.NotContains(t, tags, "deploy/composetest/"+releaseVersion, "a module outside the workspace is not released")

		out, err = release(t, repo, append(env, "VERSION="+releaseVersion))
		require.Error(t, err, "a second release of the same version")
		require.Contains(t, out, "exists already")
	})
}

// checkDist checks dist/ holds the native platform's archive and a
// SHA256SUMS that matches it, and returns the archive's files by base name.
func checkDist(t *testing.T, repo, native string) map[string][]byte {
	t.Helper()
	name := "pulse_" + releaseVersion + "_" + strings.ReplaceAll(native, "/", "_")
	entries, err := os.ReadDir(filepath.Join(repo, "dist"))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{name + ".tar.gz", "SHA256SUMS"}, names)

	data, err := os.ReadFile(filepath.Join(repo, "dist", name+".tar.gz"))
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	require.Equal(t, hex.EncodeToString(sum[:])+"  "+name+".tar.gz\n", readFile(t, filepath.Join(repo, "dist", "SHA256SUMS")))

	zr, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.True(t, h.Name == name || strings.HasPrefix(h.Name, name+"/"), "archive entry %s is under %s/", h.Name, name)
		require.Zero(t, h.Uid, "archive entries belong to uid 0")
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			files[filepath.Base(h.Name)] = b
		}
	}
	want := append(slices.Clone(releaseBinaries), "README.md", "CHANGELOG.md")
	require.ElementsMatch(t, want, slices.Collect(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}))
	return files
}

// releaseRepo copies the working tree (tracked and untracked files git
// does not ignore) into a new git repository, commits it with a CHANGELOG
// section for releaseVersion, and returns its path.
func releaseRepo(t *testing.T) string {
	t.Helper()
	src := root(t)
	dst := t.TempDir()
	for _, f := range strings.Split(strings.TrimRight(git(t, src, "ls-files", "-z", "--cached", "--others", "--exclude-standard"), "\x00"), "\x00") {
		fi, err := os.Lstat(filepath.Join(src, f))
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree
		}
		data, err := os.ReadFile(filepath.Join(src, f))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dst, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dst, f), data, fi.Mode().Perm()))
	}
	changelog := filepath.Join(dst, "CHANGELOG.md")
	text := readFile(t, changelog)
	text = strings.Replace(text, "## [Unreleased]\n", "## [Unreleased]\n\n## ["+strings.TrimPrefix(releaseVersion, "v")+"] - 2026-11-26\n", 1)
	require.NoError(t, os.WriteFile(changelog, []byte(text), 0o644))
	git(t, dst, "init", "-q")
	git(t, dst, "add", "-A")
	git(t, dst, "-c", "user.name=release test", "-c", "user.email=release@test.invalid", "commit", "-q", "-m", "the tree under test")
	return dst
}

// release runs scripts/release.sh in repo with env added, returning its
// combined output.
func release(t *testing.T, repo string, env []string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "scripts/release.sh")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GOWORK=", "GOFLAGS=", "VERSION=", "DRY_RUN=",
		"GIT_AUTHOR_NAME=release test", "GIT_AUTHOR_EMAIL=release@test.invalid",
		"GIT_COMMITTER_NAME=release test", "GIT_COMMITTER_EMAIL=release@test.invalid")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var stderr string
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), stderr)
	return strings.TrimSpace(string(out))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
