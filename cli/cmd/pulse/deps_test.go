package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheCLIHasNoServerDependencies: the pulse CLI speaks control-api's
// HTTP contract through pkg/pulsehttp, the one definition the server uses
// too, reports its version by pkg/buildinfo's rule, the services' own, and
// links nothing of the server (pkg/server, services, migrations).
func TestTheCLIHasNoServerDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if !strings.HasPrefix(pkg, "github.com/pulsequeue/pulse/") {
			continue
		}
		rest := strings.TrimPrefix(pkg, "github.com/pulsequeue/pulse/")
		if !strings.HasPrefix(rest, "cli/") && rest != "pkg/pulsehttp" && rest != "pkg/buildinfo" {
			t.Errorf("the CLI links %s; it should need only pkg/pulsehttp and pkg/buildinfo of pulse's packages", pkg)
		}
	}
}
