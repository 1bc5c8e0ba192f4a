package schemadump_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
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
	got, err := schemadump.Dump(context.Background(), pgtest.URL(t))
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(schemaFile, []byte(got), 0o644))
		t.Logf("wrote %s", schemaFile)
		return
	}
	require.Equal(t, migrations.Schema, got,
		"migrations/schema.sql is not what the migrations produce; regenerate it with `make schema` "+
			"(go test -count=1 -run '^TestSchemaSQLMatchesMigrations$' ./pkg/server/schemadump -update) and commit it")
}

func TestNormaliseDropsWhatDiffersBetweenRuns(t *testing.T) {
	a := schemadump.Normalise("--\n-- Dumped from database version 15.1\n-- Dumped by pg_dump version 15.1\n\\restrict abc\n\n\n\nCREATE TABLE t ();  \n\\unrestrict abc\n")
	b := schemadump.Normalise("--\n-- Dumped from database version 15.9\n-- Dumped by pg_dump version 15.9\n\\restrict xyz\n\nCREATE TABLE t ();\n\n\n\\unrestrict xyz\n\n")
	require.Equal(t, a, b)
	require.Equal(t, "--\n\nCREATE TABLE t ();\n", a)
	require.NotEqual(t, a, schemadump.Normalise("CREATE TABLE u ();"), "a different schema stays different")
}
