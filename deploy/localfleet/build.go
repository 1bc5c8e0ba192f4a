package localfleet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// demoPrefix marks the commands that live in examples/ rather than services/.
const demoPrefix = "demo-"

// Build compiles the named commands from the workspace at repoRoot (the
// directory holding go.work) into outDir and returns name → binary path.
// Services live in services/<name>, the demo commands (demo-*) in
// examples/<name>. One `go build` compiles them all, so shared packages are
// built once; a failure returns the compiler's output.
func Build(ctx context.Context, repoRoot, outDir string, names ...string) (map[string]string, error) {
	if len(names) == 0 {
		return map[string]string{}, nil
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	args := []string{"build", "-o", outDir + string(filepath.Separator)}
	bins := make(map[string]string, len(names))
	for _, name := range names {
		args = append(args, "./"+filepath.ToSlash(sourceDir(name)))
		bins[name] = filepath.Join(outDir, name)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build %s: go %s: %w\n%s", strings.Join(names, ", "), strings.Join(args, " "), err, out.String())
	}
	return bins, nil
}

// sourceDir is where the command called name lives, relative to the repo root.
func sourceDir(name string) string {
	if strings.HasPrefix(name, demoPrefix) {
		return filepath.Join("examples", name)
	}
	return filepath.Join("services", name)
}

// hasMain reports whether the command's folder has a main.go yet; services
// still being written are skipped rather than failing the whole fleet.
func hasMain(repoRoot, name string) bool {
	_, err := os.Stat(filepath.Join(repoRoot, sourceDir(name), "main.go"))
	return err == nil
}

// FindRepoRoot walks up from dir to the directory holding go.work.
func FindRepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("find repo root: no go.work in %s or any parent", dir)
		}
	}
}
