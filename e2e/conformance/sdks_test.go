package conformance_test

import (
	"context"
	"os/exec"
	"path/filepath"
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
