// Package testtool finds the real programs some tests drive: Prometheus
// (promtool, prometheus) and Chromium. `make test` installs them
// (scripts/ensure-tools.sh); a test whose program is still missing fails,
// saying how to get it. A developer who cannot install one opts out by
// name with PULSE_TEST_SKIP_TOOLS (docs/development.md), and only then do
// those tests skip; CI never sets it, and under CI it is ignored.
package testtool

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// EnvSkip lists the tools, comma-separated, whose tests a developer has
// chosen to skip: PULSE_TEST_SKIP_TOOLS=prometheus,chromium.
const EnvSkip = "PULSE_TEST_SKIP_TOOLS"

// A Tool is a program some tests need, under the name EnvSkip uses.
type Tool struct {
	// Name is the tool's name in EnvSkip.
	Name string
	// Programs are the executables that provide it, tried in order.
	Programs []string
	// Install says how to get it.
	Install string
}

// The tools pulse's tests use.
var (
	Promtool = Tool{Name: "prometheus", Programs: []string{"promtool"},
		Install: "Debian: apt-get install -y prometheus (or run scripts/ensure-tools.sh, which make test runs)"}
	Prometheus = Tool{Name: "prometheus", Programs: []string{"prometheus"},
		Install: "Debian: apt-get install -y prometheus (or run scripts/ensure-tools.sh, which make test runs)"}
	Chromium = Tool{Name: "chromium", Programs: []string{"chromium", "chromium-browser", "google-chrome"},
		Install: "Debian: apt-get install -y chromium (or run scripts/ensure-tools.sh, which make test runs)"}
)

// Require returns the path of tool's program. When it is missing the test
// fails with how to install it, or skips if the developer listed the tool
// in PULSE_TEST_SKIP_TOOLS outside CI.
func Require(tb testing.TB, tool Tool) string {
	tb.Helper()
	for _, name := range tool.Programs {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := strings.Join(tool.Programs, " / ") + " is not on PATH; " + tool.Install
	if Skipped(tool.Name) {
		tb.Skip(msg + "; skipped because " + EnvSkip + " lists " + tool.Name)
	}
	if os.Getenv("CI") == "" {
		msg += "; or, to skip the tests that need it on this machine, set " + EnvSkip + "=" + tool.Name
	}
	tb.Fatal(msg)
	return ""
}

// Skipped reports whether the developer opted out of name's tests. Under
// CI it is always false.
func Skipped(name string) bool {
	if os.Getenv("CI") != "" {
		return false
	}
	return slices.Contains(strings.Split(os.Getenv(EnvSkip), ","), name)
}
