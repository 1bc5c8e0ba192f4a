package schemadump_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/schemadump"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var update = flag.Bool("update", false, "rewrite migrations/schema.sql from the migrations (make schema)")

// schemaFile is migrations/schema.sql, from this package's directory.
var schemaFile = filepath.Join("..", "..", "..", "migrations", "schema.sql")

// TestSchemaSQLMatchesMigrations: migrations/schema.sql is what the
// migrations produce. Run `make schema` after changing a migration.
func TestSchemaSQLMatchesMigrations(t *testing.T) {
	got, err := schemadump.Dump(t.Context(), pgtest.URL(t))
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(schemaFile, []byte(got), 0o644))
		t.Logf("wrote %s", schemaFile)
		return
	}
	if got != migrations.Schema {
		t.Fatalf("migrations/schema.sql is not what the migrations produce; regenerate it with `make schema` "+
			"(go test -count=1 -run '^TestSchemaSQLMatchesMigrations$' ./pkg/server/schemadump -update) and commit it.\n%s",
			lineDiff(migrations.Schema, got))
	}
}

// lineDiff shows the lines between the first and the last that differ,
// "-" from want (schema.sql) and "+" from got (the migrations), with
// their line numbers, at most 40 of each.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	first := 0
	for first < len(w) && first < len(g) && w[first] == g[first] {
		first++
	}
	lw, lg := len(w), len(g)
	for lw > first && lg > first && w[lw-1] == g[lg-1] {
		lw--
		lg--
	}
	var b strings.Builder
	show := func(sign string, lines []string, from int) {
		for i, l := range lines {
			if i == 40 {
				fmt.Fprintf(&b, "%s ... %d more lines\n", sign, len(lines)-i)
				return
			}
			fmt.Fprintf(&b, "%s%5d %s\n", sign, from+i+1, l)
		}
	}
	fmt.Fprintf(&b, "--- migrations/schema.sql\n+++ what the migrations produce\n")
	show("-", w[first:lw], first)
	show("+", g[first:lg], first)
	return b.String()
}

func TestLineDiffShowsOnlyWhatDiffers(t *testing.T) {
	d := lineDiff("a\nb\nc\nd\n", "a\nB\nc\nd\ne\n")
	require.Equal(t, "--- migrations/schema.sql\n+++ what the migrations produce\n"+
		"-    2 b\n-    3 c\n-    4 d\n+    2 B\n+    3 c\n+    4 d\n+    5 e\n", d)
	require.Equal(t, "--- migrations/schema.sql\n+++ what the migrations produce\n+    2 x\n", lineDiff("a\n", "a\nx\n"))
}

func TestNormaliseDropsWhatDiffersBetweenRuns(t *testing.T) {
	a := schemadump.Normalise("--\n-- Dumped from database version 15.1\n-- Dumped by pg_dump version 15.1\n\\restrict abc\n\n\n\nCREATE TABLE t ();  \n\\unrestrict abc\n")
	b := schemadump.Normalise("--\n-- Dumped from database version 15.9\n-- Dumped by pg_dump version 15.9\n\\restrict xyz\n\nCREATE TABLE t ();\n\n\n\\unrestrict xyz\n\n")
	require.Equal(t, a, b)
	require.Equal(t, "--\n\nCREATE TABLE t ();\n", a)
	require.NotEqual(t, a, schemadump.Normalise("CREATE TABLE u ();"), "a different schema stays different")
}
