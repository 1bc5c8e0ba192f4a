package conformance_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
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
