package deploytest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Commands the deployments run, by binary name; the value is the package
// path inside the workspace.
var commands = map[string]string{
	"control-api":      "./services/control-api",
	"dispatch-gateway": "./services/dispatch-gateway",
	"reaper":           "./services/reaper",
	"scheduler":        "./services/scheduler",
	"demo-producer":    "./examples/demo-producer",
	"demo-worker":      "./examples/demo-worker",
	probeName:          "./deploy/docker/probe",
}

// probeName is the healthcheck binary every pulse image carries.
const probeName = "pulse-probe"

// longRunning are the services with an admin HTTP endpoint (/healthz,
// /readyz, /metrics), and the variable naming its address.
var longRunning = map[string]string{
	"control-api":      "PULSE_HTTP_ADDR",
	"dispatch-gateway": "PULSE_ADMIN_ADDR",
	"reaper":           "PULSE_ADMIN_ADDR",
	"scheduler":        "PULSE_ADMIN_ADDR",
}

// binDir holds the commands built for this test run; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pulse-deploytest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploytest:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// repoRoot is the workspace root (the directory holding go.work).
var repoRoot = sync.OnceValues(func() (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		return "", fmt.Errorf("deploytest must run from deploy/deploytest: %w", err)
	}
	return root, nil
})

func root(t *testing.T) string {
	t.Helper()
	r, err := repoRoot()
	require.NoError(t, err)
	return r
}

// repoPath joins rel (slash-separated) to the repo root.
func repoPath(t *testing.T, rel string) string {
	t.Helper()
	return filepath.Join(root(t), filepath.FromSlash(rel))
}

// built compiles every command once, in one `go build` so shared packages
// compile once, into binDir.
var built = sync.OnceValues(func() (map[string]string, error) {
	r, err := repoRoot()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bins := map[string]string{}
	args := []string{"build", "-o", binDir + string(filepath.Separator)}
	for name, pkg := range commands {
		args = append(args, pkg)
		bins[name] = filepath.Join(binDir, filepath.Base(pkg))
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = r
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bins, nil
})

func binary(t *testing.T, name string) string {
	t.Helper()
	bins, err := built()
	require.NoError(t, err)
	bin, ok := bins[name]
	require.True(t, ok, "no command %q", name)
	return bin
}

// envLine is a line of -h output that names a variable: the variable is
// the first word.
var envLine = regexp.MustCompile(`^\s+(PULSE_[A-Z0-9_]+)(\s|$)`)

// readVars is what `<name> -h` lists as its PULSE_* environment: the
// variables the command reads, from its own config spec.
var readVars = sync.OnceValues(func() (map[string]map[string]bool, error) {
	bins, err := built()
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]bool{}
	for name, bin := range bins {
		if name == probeName {
			continue
		}
		help, err := exec.Command(bin, "-h").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%s -h: %w\n%s", name, err, help)
		}
		vars := map[string]bool{}
		for _, line := range strings.Split(string(help), "\n") {
			if m := envLine.FindStringSubmatch(line); m != nil {
				vars[m[1]] = true
			}
		}
		if len(vars) == 0 {
			return nil, fmt.Errorf("%s -h lists no PULSE_* variable:\n%s", name, help)
		}
		out[name] = vars
	}
	return out, nil
})

// varsOf is the set of PULSE_* variables the named command reads.
func varsOf(t *testing.T, name string) map[string]bool {
	t.Helper()
	all, err := readVars()
	require.NoError(t, err)
	vars, ok := all[name]
	require.True(t, ok, "no -h output for %q", name)
	return vars
}

// requireReads fails for every PULSE_* name in set that the command does
// not read; where says which deployment set it.
func requireReads(t *testing.T, command, where string, set []string) {
	t.Helper()
	vars := varsOf(t, command)
	for _, name := range set {
		if strings.HasPrefix(name, "PULSE_") {
			require.True(t, vars[name], "%s sets %s, which %s does not read (its -h lists %v)", where, name, command, sortedKeys(vars))
		}
	}
}

// addrPort is the port of a listen address such as ":9101".
func addrPort(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, "listen address %q", addr)
	return port
}
