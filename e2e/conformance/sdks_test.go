package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// sdk is one worker SDK under test: prepare builds (or installs) what its
// driver needs once, failing with a message naming any missing tool, and
// returns the command line that runs the driver.
type sdk struct {
	name    string
	prepare func(t *testing.T, root string) []string
}

// sdks is the registry: every SDK the suite holds to the contracts. An SDK
// is listed once its driver exists; from then on a missing driver or tool
// fails the suite rather than skipping it.
var sdks = []sdk{
	{name: "go", prepare: prepareGo},
	{name: "typescript", prepare: prepareTypeScript},
	{name: "python", prepare: preparePython},
}

func prepareGo(t *testing.T, root string) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "godriver")
	ctx, cancel := context.WithTimeout(context.Background(), 5*proctest.Patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./e2e/conformance/godriver")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the Go driver: %v\n%s", err, out)
	}
	return []string{bin}
}

// preparePython finds Debian's python3 with grpcio and protobuf, installing
// them when missing and allowed (sdk/python/scripts/ensure-deps.sh prints
// the interpreter), and runs the driver from the SDK's tree.
func preparePython(t *testing.T, root string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*proctest.Patience)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "sdk", "python", "scripts", "ensure-deps.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 with grpcio and protobuf for the Python driver (sdk/python/scripts/ensure-deps.sh): %v\n%s", err, stderr.String())
	}
	return []string{strings.TrimSpace(string(out)), filepath.Join(root, "sdk", "python", "conformance", "driver.py")}
}

// nodeMajorMin is the oldest Node the TypeScript SDK supports.
const nodeMajorMin = 20

// prepareTypeScript installs the TypeScript SDK's npm packages exactly as
// its lock file says (npm ci, from the registry), builds it and runs its
// unit tests (npm test).
func prepareTypeScript(t *testing.T, root string) []string {
	t.Helper()
	node := requireTool(t, "node", "TypeScript")
	requireTool(t, "npm", "TypeScript")
	requireNodeMajor(t, node, nodeMajorMin)
	dir := filepath.Join(root, "sdk", "typescript")
	requireVersion(t, root, filepath.Join(dir, "package.json"))
	// --ignore-scripts: npm test builds, once (the package's prepare
	// script would build it a second time).
	run(t, dir, nil, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	run(t, dir, nil, "npm", "test") // builds, then the SDK's own unit tests
	return []string{node, filepath.Join(dir, "dist", "conformance", "driver.js")}
}

// requireTool fails the test unless name is on PATH, saying what needs it.
func requireTool(t *testing.T, name, forWhat string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH; the %s conformance driver needs it", name, forWhat)
	}
	return p
}

// requireNodeMajor fails unless node's major version is at least min.
func requireNodeMajor(t *testing.T, node string, minMajor int) {
	t.Helper()
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	m := regexp.MustCompile(`^v(\d+)\.`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("node --version printed %q, not vN.N.N", out)
	}
	if major, _ := strconv.Atoi(string(m[1])); major < minMajor {
		t.Fatalf("node is %s; the TypeScript SDK needs Node %d or later", out, minMajor)
	}
}

// run runs a preparation command in dir, failing the test with its output.
func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*proctest.Patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, dir, err, out)
	}
}

// requireVersion fails unless the package file's version is the modules'
// version (scripts/modversion.sh, without its v): an SDK is released with
// the proto it speaks.
func requireVersion(t *testing.T, root, packageFile string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "scripts", "modversion.sh")).Output()
	if err != nil {
		t.Fatalf("scripts/modversion.sh: %v", err)
	}
	want := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	b, err := os.ReadFile(packageFile)
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatalf("%s: %v", packageFile, err)
	}
	if pkg.Version != want {
		t.Fatalf("%s has version %q; the modules are at %q (scripts/set-version.sh sets both)", packageFile, pkg.Version, want)
	}
}
