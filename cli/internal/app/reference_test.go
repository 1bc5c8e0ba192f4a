package app

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// referencePath is docs/cli.md at the repository root, from this package's
// directory (where go test runs).
const referencePath = "../../../docs/cli.md"

const updateReferenceHint = "PULSE_UPDATE_DOCS=1 go test ./cli/internal/app -run TestReference"

// TestReference keeps docs/cli.md equal to what the command tree renders, so
// a new command, flag or example cannot leave the reference behind.
func TestReference(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	require.NoError(t, WriteReference(&buf))
	got := buf.String()

	t.Run("DocumentsEveryVisibleCommand", func(t *testing.T) {
		t.Parallel()
		// Walked here rather than with walkReference, so a renderer that
		// skips a command cannot also skip it in this check.
		var check func(c *cobra.Command)
		check = func(c *cobra.Command) {
			if c.Hidden {
				return
			}
			require.Contains(t, got, "\n## "+c.CommandPath()+"\n", "docs/cli.md has no section for %q", c.CommandPath())
			for _, sub := range c.Commands() {
				check(sub)
			}
		}
		check(newRoot(&env{}))
	})

	t.Run("EmbedsNoMachinePath", func(t *testing.T) {
		t.Parallel()
		for _, dir := range []func() (string, error){os.UserHomeDir, os.UserConfigDir, os.Getwd} {
			if d, err := dir(); err == nil && len(d) > 1 {
				require.NotContains(t, got, d)
			}
		}
	})

	t.Run("MatchesDocsFile", func(t *testing.T) {
		t.Parallel()
		if os.Getenv("PULSE_UPDATE_DOCS") != "" {
			require.NoError(t, os.WriteFile(referencePath, []byte(got), 0o644))
			return
		}
		want, err := os.ReadFile(referencePath)
		require.NoError(t, err, "docs/cli.md is missing; create it with: %s", updateReferenceHint)
		if string(want) != got {
			t.Errorf("docs/cli.md is out of date with the command tree; regenerate it with:\n  %s\nthen review and commit the diff.\n%s",
				updateReferenceHint, firstDifference(string(want), got))
		}
	})
}

// firstDifference points at the first line where the committed reference
// and the rendered one part, so the failure says what changed.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("first difference at line %d:\n  docs/cli.md: %s\n  rendered:    %s", i+1, wl, gl)
		}
	}
	return ""
}
