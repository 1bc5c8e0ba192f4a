package deploytest

import (
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// requireTool returns the path of program, which the named tool provides.
// It is pkg/server/testtool.Require for this module, which does not
// depend on pkg/server: a missing program fails the test saying how to
// install it, unless the developer listed the tool in
// PULSE_TEST_SKIP_TOOLS (docs/development.md) outside CI.
func requireTool(t *testing.T, tool, program, install string) string {
	t.Helper()
	if p, err := exec.LookPath(program); err == nil {
		return p
	}
	msg := program + " is not on PATH; " + install + " (or run scripts/ensure-tools.sh, which make test runs)"
	if os.Getenv("CI") == "" {
		if slices.Contains(strings.Split(os.Getenv("PULSE_TEST_SKIP_TOOLS"), ","), tool) {
			t.Skip(msg + "; skipped because PULSE_TEST_SKIP_TOOLS lists " + tool)
		}
		msg += "; or, to skip the tests that need it on this machine, set PULSE_TEST_SKIP_TOOLS=" + tool
	}
	t.Fatal(msg)
	return ""
}
