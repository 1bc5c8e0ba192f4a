package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/migrations"
	"github.com/pulsequeue/pulse/pkg/server/migrate"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/schemadump"
)

func TestMain(m *testing.M) { os.Exit(pgtest.MainLeakChecked(m)) }

// patience bounds every wait for an event in these tests.
const patience = time.Minute

// liveSet is every migration of the repository, then testdata/live:
// migrations written the way migrations/README.md asks, that a live jobs
// table needs care for, numbered after migrations.Latest (their files
// count from 00002; liveVersion maps them), so a database migrated to the
// repository's schema takes them next.
func liveSet(t testing.TB) fs.FS {
	t.Helper()
	set := fstest.MapFS{}
	repoFiles, err := fs.Glob(migrations.FS, "0*.sql")
	require.NoError(t, err)
	for _, n := range repoFiles {
		b, err := fs.ReadFile(migrations.FS, n)
		require.NoError(t, err)
		set[n] = &fstest.MapFile{Data: b}
	}
	live := os.DirFS("testdata/live")
	names, err := fs.Glob(live, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, n := range names {
		b, err := fs.ReadFile(live, n)
		require.NoError(t, err)
		num, rest, ok := strings.Cut(n, "_")
		require.True(t, ok, n)
		v, err := strconv.Atoi(num)
		require.NoError(t, err, n)
		set[fmt.Sprintf("%05d_%s", liveVersion(int64(v)), rest)] = &fstest.MapFile{Data: b}
	}
	return set
}

// liveVersion is the version testdata/live's file number n takes in
// liveSet: 00002 is the first after migrations.Latest.
func liveVersion(n int64) int64 { return migrations.Latest + n - 1 }

func opts(fsys fs.FS, log *slog.Logger) migrate.Options {
	o := migrate.DefaultOptions()
	o.Migrations = fsys
	o.Logger = log
	return o
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// waitFor polls cond until it holds or patience runs out.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recorder is a slog handler that keeps every record's message and
// attributes.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// count is how many records carry msg.
func (r *recorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.Message == msg {
			n++
		}
	}
	return n
}

const retryMsg = "migration gave up waiting for a lock; retrying"

// TestConcurrentRunsApplyEachMigrationOnce: two migrate runs against one
// database (a retried Kubernetes Job and a manual run) both succeed, and
// each migration is applied once: the second run waits on goose's session
// lock while the first is inside a migration, then finds nothing to do.
func TestConcurrentRunsApplyEachMigrationOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.EmptyURL(t)
	// The first migration waits on an advisory lock the test holds, so
	// the first run is inside it when the second starts.
	set := fstest.MapFS{
		"00001_first.sql":  {Data: []byte("-- +goose Up\nCREATE TABLE applied (n int);\nINSERT INTO applied VALUES (1);\nSELECT pg_advisory_xact_lock(727001);\n")},
		"00002_second.sql": {Data: []byte("-- +goose Up\nINSERT INTO applied VALUES (2);\n")},
	}
	gate := connect(t, url)
	_, err := gate.Exec(ctx, `SELECT pg_advisory_lock(727001)`)
	require.NoError(t, err)

	type result struct {
		v   int64
		err error
	}
	results := make(chan result, 2)
	run := func() {
		v, err := migrate.Up(ctx, url, opts(set, nil))
		results <- result{v, err}
	}
	go run()
	watch := connect(t, url)
	inside := func() bool {
		var n int
		require.NoError(t, watch.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND objid = 727001 AND NOT granted`).Scan(&n))
		return n == 1
	}
	waitFor(t, "the first run to block inside its first migration", inside)
	go run()
	// The second run has got as far as it can while the first is inside
	// its migration: it tried goose's session lock (and failed: the first
	// run holds it), or, were there no session lock, it waits on a lock
	// the first run's migration holds.
	waitFor(t, "the second run to start and be held back", func() bool {
		var n int
		require.NoError(t, watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
			  AND (query LIKE 'SELECT pg_try_advisory_lock%' OR wait_event_type = 'Lock')`).Scan(&n))
		return n == 2
	})
	require.True(t, inside(), "the first run is still inside its migration")
	_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock(727001)`)
	require.NoError(t, err)

	for range 2 {
		r := <-results
		require.NoError(t, r.err)
		require.Equal(t, int64(2), r.v)
	}
	rows, err := watch.Query(ctx, `SELECT n FROM applied ORDER BY n`)
	require.NoError(t, err)
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Equal(t, []int32{1, 2}, applied, "each migration ran once")
	var recorded int
	require.NoError(t, watch.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&recorded))
	require.Equal(t, 2, recorded)
}

// TestConcurrentRunsOfTheRealMigrations: the same with the embedded
// migrations, started together.
func TestConcurrentRunsOfTheRealMigrations(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			v, err := migrate.Up(t.Context(), url, migrate.DefaultOptions())
			if err == nil && v != migrations.Latest {
				err = errors.New("not at the latest version")
			}
			errs <- err
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
}

// busyTable is a database at version 1 of a two-migration set whose
// second migration alters a table the test holds a lock on.
func busyTable(t *testing.T) (url string, set fstest.MapFS, release func()) {
	t.Helper()
	ctx := context.Background()
	url = pgtest.EmptyURL(t)
	set = fstest.MapFS{"00001_busy.sql": {Data: []byte("-- +goose Up\nCREATE TABLE busy (n int);\n")}}
	v, err := migrate.Up(ctx, url, opts(set, nil))
	require.NoError(t, err)
	require.Equal(t, int64(1), v)
	set["00002_alter.sql"] = &fstest.MapFile{Data: []byte("-- +goose Up\nALTER TABLE busy ADD COLUMN m int;\n")}
	holder := connect(t, url)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	// ACCESS SHARE, what any SELECT holds: enough to make ALTER TABLE's
	// ACCESS EXCLUSIVE wait.
	_, err = tx.Exec(ctx, `LOCK TABLE busy IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	return url, set, func() { require.NoError(t, tx.Commit(ctx)) }
}

// TestAMigrationThatHitsLockTimeoutIsRetried: a migration that cannot get
// its lock within lock_timeout fails, is logged, and is retried until the
// lock comes free; then it applies.
func TestAMigrationThatHitsLockTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	url, set, release := busyTable(t)
	rec := &recorder{}
	o := opts(set, slog.New(rec))
	o.LockTimeout, o.LockRetries, o.RetryBackoff = 20*time.Millisecond, 1000, 5*time.Millisecond
	type result struct {
		v   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := migrate.Up(t.Context(), url, o)
		done <- result{v, err}
	}()
	waitFor(t, "a retry to be logged", func() bool { return rec.count(retryMsg) >= 1 })
	release()
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, int64(2), r.v)

	var columns int
	require.NoError(t, connect(t, url).QueryRow(t.Context(), `SELECT count(*) FROM information_schema.columns
		WHERE table_name = 'busy' AND column_name = 'm'`).Scan(&columns))
	require.Equal(t, 1, columns, "the migration applied")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, r := range rec.recs {
		if r.Message != retryMsg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		require.Equal(t, "2", attrs["version"], "the retry names the migration")
		require.Equal(t, "00002_alter.sql", attrs["file"])
		require.Equal(t, "20ms", attrs["lock_timeout"])
		require.Contains(t, attrs["err"], "lock timeout")
	}
}

// TestAMigrationGivesUpAfterItsRetries: with the lock never free, Up
// fails after LockRetries retries, saying so, and the database stays at
// the version before.
func TestAMigrationGivesUpAfterItsRetries(t *testing.T) {
	t.Parallel()
	url, set, release := busyTable(t)
	defer release()
	rec := &recorder{}
	o := opts(set, slog.New(rec))
	o.LockTimeout, o.LockRetries, o.RetryBackoff = 20*time.Millisecond, 2, 5*time.Millisecond
	_, err := migrate.Up(t.Context(), url, o)
	require.Error(t, err)
	require.True(t, migrate.IsLockTimeout(err), "%v", err)
	require.ErrorContains(t, err, "gave up after 2 retries on lock_timeout 20ms")
	require.Equal(t, 2, rec.count(retryMsg))
	v, err := migrate.Version(t.Context(), connect(t, url))
	require.NoError(t, err)
	require.Equal(t, int64(1), v)
}

// TestEveryMigrationSessionHasTheLockTimeout: the session the migrations
// run in carries Options.LockTimeout.
func TestEveryMigrationSessionHasTheLockTimeout(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	set := fstest.MapFS{"00001_seen.sql": {Data: []byte("-- +goose Up\nCREATE TABLE seen AS SELECT current_setting('lock_timeout') AS lock_timeout;\n")}}
	o := opts(set, nil)
	o.LockTimeout = 1234 * time.Millisecond
	_, err := migrate.Up(t.Context(), url, o)
	require.NoError(t, err)
	var got string
	require.NoError(t, connect(t, url).QueryRow(t.Context(), `SELECT lock_timeout FROM seen`).Scan(&got))
	require.Equal(t, "1234ms", got)
}

func TestUpRefusesBadOptions(t *testing.T) {
	t.Parallel()
	o := migrate.DefaultOptions()
	o.LockTimeout = 0
	_, err := migrate.Up(t.Context(), "postgres://localhost:1/none", o)
	require.ErrorContains(t, err, "lock timeout must be positive")
	o = migrate.DefaultOptions()
	o.LockRetries = -1
	_, err = migrate.Up(t.Context(), "postgres://localhost:1/none", o)
	require.ErrorContains(t, err, "lock retries must not be negative")
}

// TestEveryMigrationAfterTheBaselineRoundTrips: for each migration after
// the baseline, in the embedded set and in the live test set, Down gives
// back exactly the schema before it (pg_dump --schema-only) and Up again
// the schema after it.
func TestEveryMigrationAfterTheBaselineRoundTrips(t *testing.T) {
	t.Parallel()
	for name, fsys := range map[string]fs.FS{"embedded": migrations.FS, "live": liveSet(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := pgtest.EmptyURL(t)
			cfg, err := pgx.ParseConfig(url)
			require.NoError(t, err)
			db := stdlib.OpenDB(*cfg)
			t.Cleanup(func() { db.Close() })
			provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys)
			require.NoError(t, err)
			dump := func() string {
				t.Helper()
				s, err := schemadump.Dump(ctx, url)
				require.NoError(t, err)
				return s
			}
			sources := provider.ListSources()
			require.Equal(t, int64(1), sources[0].Version)
			_, err = provider.UpTo(ctx, 1)
			require.NoError(t, err)
			before := dump()
			for _, src := range sources[1:] {
				_, err = provider.UpTo(ctx, src.Version)
				require.NoError(t, err, src.Path)
				after := dump()
				require.NotEqual(t, before, after, "%s changes the schema", src.Path)
				_, err = provider.DownTo(ctx, src.Version-1)
				require.NoError(t, err, src.Path)
				require.Equal(t, before, dump(), "%s: Down gives back the schema before it", src.Path)
				_, err = provider.UpTo(ctx, src.Version)
				require.NoError(t, err, src.Path)
				require.Equal(t, after, dump(), "%s: Up applies again after Down", src.Path)
				before = after
			}
			if name == "live" {
				require.Greater(t, len(sources), 1, "the live set has migrations after the baseline")
			}
		})
	}
}

// TestMigrationsFollowTheLiveTableRules: every migration after the
// baseline, embedded or in the live test set, follows the rules of
// migrations/README.md; and the check refuses each way of breaking them.
func TestMigrationsFollowTheLiveTableRules(t *testing.T) {
	t.Parallel()
	require.NoError(t, migrate.CheckRules(migrations.FS))
	require.NoError(t, migrate.CheckRules(liveSet(t)))

	bad := map[string]string{
		"index without CONCURRENTLY":     "-- +goose Up\nCREATE INDEX jobs_x_idx ON jobs (topic);\n",
		"unique index, schema-qualified": "-- +goose NO TRANSACTION\n-- +goose Up\nCREATE UNIQUE INDEX jobs_x_idx ON public.jobs USING btree (topic);\n",
		"drop without CONCURRENTLY":      "-- +goose NO TRANSACTION\n-- +goose Up\nDROP INDEX IF EXISTS jobs_claim_idx;\n",
		"CONCURRENTLY in a transaction":  "-- +goose Up\nCREATE INDEX CONCURRENTLY jobs_x_idx ON jobs (topic);\n",
		"alter without lock_timeout":     "-- +goose Up\nALTER TABLE jobs ADD COLUMN x int;\n",
		"lock_timeout after the alter":   "-- +goose Up\nALTER TABLE ONLY jobs ADD COLUMN x int;\nSET LOCAL lock_timeout = '1s';\n",
		"alter outside a transaction":    "-- +goose NO TRANSACTION\n-- +goose Up\nSET LOCAL lock_timeout = '1s';\nALTER TABLE jobs ADD COLUMN x int;\n",
	}
	for what, sql := range bad {
		err := migrate.CheckRules(fstest.MapFS{"00002_bad.sql": {Data: []byte(sql)}})
		require.Error(t, err, what)
		require.ErrorContains(t, err, "00002_bad.sql", what)
	}
	good := map[string]string{
		"guarded alter": "-- +goose Up\nSET LOCAL lock_timeout = '500ms';\nALTER TABLE jobs ADD COLUMN x int;\n-- +goose Down\nALTER TABLE jobs DROP COLUMN x;\n",
		"other table":   "-- +goose Up\nCREATE INDEX schedules_x_idx ON schedules (topic);\nALTER TABLE schedules ADD COLUMN x int;\n",
		"jobs in a comment or a function body": "-- +goose Up\n-- CREATE INDEX jobs_x ON jobs (topic);\n" +
			"CREATE FUNCTION f() RETURNS void LANGUAGE sql AS $$ ALTER TABLE jobs ADD COLUMN y int $$;\n",
		"the baseline itself is not checked": "",
	}
	for what, sql := range good {
		name := "00002_good.sql"
		if sql == "" {
			name, sql = "00001_baseline.sql", "-- +goose Up\nCREATE INDEX jobs_x_idx ON jobs (topic);\n"
		}
		require.NoError(t, migrate.CheckRules(fstest.MapFS{name: {Data: []byte(sql)}}), what)
	}
}
