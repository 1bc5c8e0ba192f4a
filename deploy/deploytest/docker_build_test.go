package deploytest

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"github.com/stretchr/testify/require"
)

// TestDockerBuildStage runs the Dockerfile's build step without Docker:
// the repo filtered by Dockerfile.dockerignore (with BuildKit's own
// pattern matcher) is the read-only "bind mount", the stage's ENV is the
// environment, and its go build command runs as written, /out/ pointing
// at a temp dir. It proves the ignore file keeps everything the workspace
// needs and that every binary the image targets COPY is produced.
func TestDockerBuildStage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the image build stage: builds every binary from a copy of the repo (about 25 s on two cores); make test-long runs it")
	}
	df := parseDockerfile(t, repoPath(t, dockerfilePath))
	build := df.stages["build"]
	require.NotNil(t, build)

	f, err := os.Open(repoPath(t, dockerfilePath+".dockerignore"))
	require.NoError(t, err)
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	require.NoError(t, err)
	pm, err := patternmatcher.New(patterns)
	require.NoError(t, err)
	ctxDir := filepath.Join(t.TempDir(), "context")
	copyContext(t, root(t), ctxDir, pm)
	t.Cleanup(func() { _ = makeWritable(ctxDir) })

	var env, run []string
	for _, in := range build.body {
		switch in.cmd {
		case "ENV":
			env = append(env, "export "+in.args)
		case "RUN":
			var words []string
			for _, w := range strings.Fields(in.args) {
				if !strings.HasPrefix(w, "--mount=") {
					words = append(words, w)
				}
			}
			run = append(run, strings.Join(words, " "))
		}
	}
	require.NotEmpty(t, run)
	out := t.TempDir()
	script := strings.ReplaceAll(strings.Join(append(env, run...), "\n"), "/out/", out+"/")
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = ctxDir
	cmd.Env = append(os.Environ(), "GOWORK=", "GOFLAGS=")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "the build stage fails on the Docker build context:\n%s\n%s", script, b)

	// The bind mount is read-only: the build must not need to write the
	// workspace (go.work.sum above all). Root ignores the file modes, so
	// compare too.
	for _, name := range []string{"go.work", "go.work.sum"} {
		want, err := os.ReadFile(filepath.Join(root(t), name))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(ctxDir, name))
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "the build changed %s: it would fail on Docker's read-only mount (is a go.sum or go.work.sum entry missing?)", name)
	}

	for _, name := range df.order {
		for _, src := range df.copies(name) {
			require.FileExists(t, filepath.Join(out, strings.TrimPrefix(src, "/out/")), "target %s copies %s", name, src)
		}
	}
}

// copyContext copies the files of src that the ignore patterns keep into
// dst, read-only, as BuildKit would send them.
func copyContext(t *testing.T, src, dst string, pm *patternmatcher.PatternMatcher) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dst, 0o755))
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil || rel == "." {
			return err
		}
		skip, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		switch {
		case skip && d.IsDir() && !pm.Exclusions():
			return filepath.SkipDir
		case skip:
			return nil
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		outFile, err := os.OpenFile(filepath.Join(dst, rel), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o444)
		if err != nil {
			return err
		}
		if _, err := io.Copy(outFile, in); err != nil {
			outFile.Close()
			return err
		}
		return outFile.Close()
	})
	require.NoError(t, err)
	require.NoError(t, filepath.WalkDir(dst, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			err = os.Chmod(path, 0o555)
		}
		return err
	}))
}

// makeWritable undoes copyContext's read-only modes so the temp dir can be
// removed.
func makeWritable(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			err = os.Chmod(path, 0o755)
		}
		return err
	})
}
