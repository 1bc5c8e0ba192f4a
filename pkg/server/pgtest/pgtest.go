// Package pgtest gives every test a fresh, migrated database on a real
// PostgreSQL server. It uses PULSE_TEST_DATABASE_URL when set; otherwise it
// starts a throwaway cluster for the test binary (see pgcluster). The schema
// is migrated once into a template database and each test clones it, which
// takes milliseconds.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/server/migrate"
	"github.com/pulsequeue/pulse/pkg/server/pgcluster"
)

// EnvURL names the variable that points tests at an existing server. The URL
// must allow CREATE DATABASE.
const EnvURL = "PULSE_TEST_DATABASE_URL"

var (
	once      sync.Once
	serverURL string
	cluster   *pgcluster.Cluster
	startErr  error
	tmplName  string
	// cloneClause ends each CREATE DATABASE of a test database. On
	// PostgreSQL 15 and later it asks for a file copy of the template:
	// the default since 15 (WAL_LOG) writes every page of it to the WAL,
	// and with a template this small the copy and its checkpoint cost
	// less (jobstore's 253 databases: 47 s of creating against 70 s,
	// the package 72 s against 81 s).
	cloneClause string
)

// Main runs the package's tests and stops the throwaway cluster, if one was
// started, once they finish. Call it from TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	return code
}

// MainLeakChecked is Main followed, when every test passed, by a check
// that no goroutine outlived the tests (go.uber.org/goleak). Call it from
// TestMain: os.Exit(pgtest.MainLeakChecked(m)).
func MainLeakChecked(m *testing.M) int {
	code := Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// Cluster returns the throwaway cluster when this process started one, or
// nil when tests run against PULSE_TEST_DATABASE_URL.
func Cluster(tb testing.TB) *pgcluster.Cluster {
	tb.Helper()
	setup(tb)
	return cluster
}

func setup(tb testing.TB) {
	tb.Helper()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		serverURL = os.Getenv(EnvURL)
		if serverURL == "" {
			cluster, startErr = pgcluster.Start(ctx, pgcluster.Options{Fast: true, MaxConnections: 400,
				// Pause exactness is judged by commit time (claimwitness).
				Settings: map[string]string{"track_commit_timestamp": "on"}})
			if startErr != nil {
				return
			}
			serverURL = cluster.URL("postgres")
			shareWithFuzzWorkers(serverURL)
		}
		tmplName, startErr = ensureTemplate(ctx)
		if startErr == nil {
			cloneClause, startErr = templateClause(ctx, tmplName)
		}
	})
	if startErr != nil {
		tb.Fatalf("pgtest: %v", startErr)
	}
}

// shareWithFuzzWorkers hands a fuzz coordinator's cluster to the worker
// processes it is about to start (they inherit its environment), instead
// of each worker starting its own: a cluster costs seconds on a busy
// machine, long enough for a short -fuzztime to run out before a worker
// fuzzes at all, and a worker the coordinator kills cannot stop the
// cluster it started. The coordinator stops the cluster after its workers
// have exited.
func shareWithFuzzWorkers(url string) {
	fuzz, worker := flag.Lookup("test.fuzz"), flag.Lookup("test.fuzzworker")
	if fuzz == nil || fuzz.Value.String() == "" || (worker != nil && worker.Value.String() == "true") {
		return
	}
	_ = os.Setenv(EnvURL, url)
}

// ensureTemplate migrates a template database named after the migrations'
// content, once per server; concurrent test binaries serialise on an
// advisory lock and the finished template is published by rename.
func ensureTemplate(ctx context.Context) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := migrations.FS.ReadFile(path)
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	name := "pulse_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16]

	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", redact(serverURL), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(727272)`); err != nil {
		return "", err
	}
	defer func() { _, _ = admin.Exec(context.Background(), `SELECT pg_advisory_unlock(727272)`) }() // the session ends right after and releases it anyway

	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+building+` WITH (FORCE)`); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+building); err != nil {
		return "", err
	}
	if _, err := migrate.Up(ctx, withDatabase(serverURL, building), migrate.DefaultOptions()); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+building+` RENAME TO `+name); err != nil {
		return "", err
	}
	return name, nil
}

// templateClause is how CREATE DATABASE clones tmpl on this server.
func templateClause(ctx context.Context, tmpl string) (string, error) {
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", redact(serverURL), err)
	}
	defer admin.Close(ctx)
	var version int
	if err := admin.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return "", err
	}
	if version >= 150000 {
		return ` TEMPLATE ` + tmpl + ` STRATEGY FILE_COPY`, nil
	}
	return ` TEMPLATE ` + tmpl, nil
}

// URL creates a fresh migrated database for the test and returns its
// connection string; the database is dropped when the test ends.
func URL(tb testing.TB) string {
	tb.Helper()
	return database(tb, "pulse_test_", true)
}

// Pool opens a pool on a fresh database (see URL), closed when the test ends.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), URL(tb))
	if err != nil {
		tb.Fatalf("pgtest: pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// URLWithDefault is URL for a database whose sessions start with setting
// at value (ALTER DATABASE ... SET), as an operator's database may: for
// tests of how pulse behaves where Postgres is configured differently.
// Only sessions opened after the call get it.
func URLWithDefault(tb testing.TB, setting, value string) string {
	tb.Helper()
	raw := URL(tb)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	// ALTER DATABASE takes neither parameter: the names are quoted
	// identifiers, the value a literal set_config checks first.
	if _, err := conn.Exec(ctx, `SELECT set_config($1, $2, false)`, setting, value); err != nil {
		tb.Fatalf("pgtest: %s = %s: %v", setting, value, err)
	}
	stmt := `ALTER DATABASE ` + pgx.Identifier{conn.Config().Database}.Sanitize() +
		` SET ` + pgx.Identifier{setting}.Sanitize() + ` = '` + strings.ReplaceAll(value, "'", "''") + `'`
	if _, err := conn.Exec(ctx, stmt); err != nil {
		tb.Fatalf("pgtest: %s: %v", stmt, err)
	}
	return raw
}

// EmptyURL creates a fresh database with no schema at all, for tests of
// migration and of the schema-version check.
func EmptyURL(tb testing.TB) string {
	tb.Helper()
	return database(tb, "pulse_empty_", false)
}

// database creates a database named prefix and 12 random hex digits, a
// clone of the migrated template when migrated is set, drops it when the
// test ends, and returns its connection string.
func database(tb testing.TB, prefix string, migrated bool) string {
	tb.Helper()
	setup(tb)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	create := `CREATE DATABASE ` + name
	if migrated {
		create += cloneClause // set by setup
	}
	if _, err := admin.Exec(ctx, create); err != nil {
		tb.Fatalf("pgtest: create %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			tb.Logf("pgtest: drop %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			tb.Logf("pgtest: drop %s: %v", name, err)
		}
	})
	return withDatabase(serverURL, name)
}

func withDatabase(raw, db string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Keyword/value DSN: append the dbname, later keys win.
		return raw + " dbname=" + db
	}
	u.Path = "/" + db
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}
