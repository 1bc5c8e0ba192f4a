package jobstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Rebuilding the jobs table's indexes (ADR-0070). A long transaction keeps
// every row version a claim, a report or retention leaves behind, and the
// indexes grow with them; once a vacuum has removed those entries, a
// B-tree's emptied pages are reused but its file keeps its size. The
// reaper's reindexer estimates how large each index would be rebuilt and
// rebuilds, with REINDEX INDEX CONCURRENTLY, the ones many times that
// size. The statements are here, on one dedicated connection
// (IndexMaintenance), because a rebuild cannot run inside a transaction
// and holds its session for as long as it reads the table twice.

// ReindexLockKey is the session advisory lock one IndexMaintenance holds, so
// that of several reapers one rebuilds at a time and none drops the
// half-built index of another's rebuild as a leftover. Applications sharing
// pulse's database must not use this advisory lock key.
const ReindexLockKey = "483006378854" // PauseBarrierKey + 1

// ReindexLockTimeout bounds every lock wait of a rebuild: the table's lock
// at its start, and the waits for the transactions older than each of its
// phases, which on a busy queue include a claim, a report or a count in
// flight (up to a second or two under load), so it is not shorter than a
// few of those. The reindexer starts a rebuild only when no vacuum of the
// table runs and no snapshot has been open for long (Obstacle); an
// autovacuum that starts in the moment between is cancelled by Postgres
// after deadlock_timeout, and comes back at autovacuum's next round.
const ReindexLockTimeout = time.Minute

// ReindexStatementTimeout bounds one rebuild, which reads the whole table
// twice.
const ReindexStatementTimeout = time.Hour

// IndexSize is one of the jobs table's B-tree indexes: its size on disk and
// what the reindexer needs to estimate the size it needs between two
// vacuums (CompactBytes): the entries the last vacuum or analyze counted,
// the table's rows then and now, and the width of its keys.
type IndexSize struct {
	Schema, Name string
	Bytes        int64
	// Entries is pg_class.reltuples of the index; negative when Postgres
	// has not counted them yet (never vacuumed or analyzed).
	Entries float64
	// KeyWidth is the summed width of the index's columns in bytes: fixed
	// widths from the catalog, variable ones from pg_stats (32 without
	// statistics).
	KeyWidth int64
	// TableBytes is the size of the jobs table's heap, which a rebuild
	// reads twice.
	TableBytes int64
	// TableCounted is the table's pg_class.reltuples, counted with the
	// index's entries (negative when never counted), and TableLive its
	// live rows now (pg_stat_user_tables.n_live_tup, which every commit
	// updates): their ratio is how much the table grew since Entries was
	// counted.
	TableCounted, TableLive float64
	// TableDead is the table's row versions no transaction sees any more
	// that no vacuum has removed yet (n_dead_tup): each has an entry in
	// every index that covered it until a vacuum comes by.
	TableDead float64
	// Partial is an index with a WHERE clause, holding only the rows it
	// matches (the claim index: queued jobs).
	Partial bool
}

// entries is what the index holds between two vacuums: Entries grown with
// the table since they were counted (a table filling up — a new queue, a
// backlog — has more than the last count, and its indexes would look
// bloated by them; never shrunk, since the live count starts again from
// zero when Postgres discards its statistics after a crash), and the
// table's dead versions waiting for a vacuum, which a rebuild leaves out
// but which on a busy table come back within a vacuum's round: with them
// counted an index at its working size does not look bloated (ADR-0075).
// A partial index is given none of them: it has entries only for the
// versions it matched, which the statistics do not say, and its working
// size is left to the cooldown (the claim index, a few hundred queued
// jobs at tens of megabytes, is rebuilt there at most once an hour).
func (s IndexSize) entries() float64 {
	n := s.Entries
	if s.TableCounted > 0 && s.TableLive > s.TableCounted {
		n *= s.TableLive / s.TableCounted
	}
	if !s.Partial {
		n += max(s.TableDead, 0)
	}
	return n
}

// btree page layout (PostgreSQL's bufpage.h and nbtree.h): the usable space
// of an 8 kB page after its header and the B-tree's special space, the
// fill a rebuild leaves on leaf pages (fillfactor 90), and an entry's
// overhead: its 8-byte header and 4-byte line pointer.
const (
	btreePageBytes     = 8192
	btreeUsableBytes   = btreePageBytes - 24 - 16
	btreeLeafFill      = 0.90
	btreeEntryOverhead = 8 + 4
)

// CompactBytes is the size a rebuild would give the index: its entries
// (each key padded to 8 bytes, plus the entry's header and line pointer)
// on leaf pages filled as a rebuild fills them, a hundredth more for the
// inner pages, and the metapage, counting what the index holds between two
// vacuums (entries). Deduplication makes a rebuilt index with repeated keys
// smaller still, so the estimate errs large, which errs on the side of not
// rebuilding. Zero when the entries are not known.
func (s IndexSize) CompactBytes() int64 {
	if s.Entries < 0 {
		return 0
	}
	entry := btreeEntryOverhead + (s.KeyWidth+7)/8*8
	leaves := math.Ceil(s.entries() * float64(entry) / (btreeUsableBytes * btreeLeafFill))
	pages := math.Max(1, math.Ceil(leaves*1.01)) + 1
	return int64(pages) * btreePageBytes
}

// Bloat is Bytes over CompactBytes; 0 when the entries are not known.
func (s IndexSize) Bloat() float64 {
	c := s.CompactBytes()
	if c == 0 {
		return 0
	}
	return float64(s.Bytes) / float64(c)
}

// indexSizesSQL lists the jobs table's valid B-tree indexes on plain
// columns (every one but the GIN index on tags) with what IndexSize needs.
const indexSizesSQL = `
SELECT n.nspname, c.relname, pg_relation_size(c.oid), c.reltuples::float8, pg_relation_size(t.oid),
       t.reltuples::float8, pg_stat_get_live_tuples(t.oid)::float8, pg_stat_get_dead_tuples(t.oid)::float8,
       i.indpred IS NOT NULL,
       (SELECT COALESCE(sum(CASE WHEN a.attlen > 0 THEN a.attlen ELSE COALESCE(st.avg_width, 32) END), 0)::int8
          FROM pg_attribute a
          LEFT JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = t.relname AND st.attname = a.attname
         WHERE a.attrelid = t.oid AND a.attnum = ANY (i.indkey::int2[]))
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
JOIN pg_am am ON am.oid = c.relam
WHERE i.indrelid = 'jobs'::regclass AND i.indisvalid AND i.indisready AND am.amname = 'btree' AND i.indexprs IS NULL
ORDER BY c.relname`

// leftoversSQL finds what failed rebuilds leave: REINDEX CONCURRENTLY builds
// the new index as <name>_ccnew (invalid until it is done) and keeps the
// old one as <name>_ccold after the swap until it drops it, so a rebuild
// cancelled or timed out between those steps leaves an invalid index under
// one of those names (a digit after it when the name was taken), which
// Postgres maintains on every write and never uses.
const leftoversSQL = `
SELECT n.nspname, c.relname
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.indrelid = 'jobs'::regclass AND NOT i.indisvalid
  AND c.relname ~ '_cc(new|old)[0-9]*$'
ORDER BY c.relname`

// obstacleSQL says what would make a rebuild wait now: a vacuum or an
// analyze of the jobs table in progress (the rebuild's lock would block
// it, and it the rebuild), how long the oldest other transaction of this database
// holding a snapshot has been open (a rebuild waits for every snapshot
// older than each of its phases), how many vacuums of the table have
// ended (the reindexer waits for one or two after a long snapshot), and
// the size of its heap (after a long snapshot, the reindexer rebuilds the
// indexes that churn once more when the heap is back near its size).
const obstacleSQL = `
SELECT (SELECT count(*) FROM pg_stat_progress_vacuum
         WHERE datname = current_database() AND relid = 'jobs'::regclass),
       (SELECT count(*) FROM pg_stat_progress_analyze
         WHERE datname = current_database() AND relid = 'jobs'::regclass),
       pg_stat_get_vacuum_count('jobs'::regclass) + pg_stat_get_autovacuum_count('jobs'::regclass),
       pg_relation_size('jobs'::regclass),
       (SELECT COALESCE(extract(epoch FROM max(clock_timestamp() - xact_start)), 0)::float8
          FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND backend_type = 'client backend' AND backend_xmin IS NOT NULL AND xact_start IS NOT NULL)`

// IndexMaintenance is one connection of its own, holding ReindexLockKey,
// on which the reindexer reads index sizes, drops leftovers and rebuilds.
type IndexMaintenance struct {
	conn *pgx.Conn
}

// OpenIndexMaintenance connects with the store's pool settings, takes
// ReindexLockKey, and sets the session's lock_timeout to lockTimeout
// (ReindexLockTimeout in the reaper), its statement_timeout to
// ReindexStatementTimeout and its max_parallel_maintenance_workers to 0.
// Postgres otherwise builds the index of a table past a few megabytes with
// a parallel worker beside the session's process (one with the default 64
// MB of maintenance_work_mem): a rebuild is maintenance beside a live
// queue, and the worker is one more core taken from its claims and
// reports — on a two-core host, the last one. It returns nil and no error
// when another session holds the key. The connection is the caller's to
// Close; it is not the pool's, so a rebuild that takes minutes leaves
// every pool connection to the other loops.
func (s *Store) OpenIndexMaintenance(ctx context.Context, lockTimeout time.Duration) (*IndexMaintenance, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, interpretError("index maintenance: connect", err)
	}
	var held bool
	err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+ReindexLockKey+`)`).Scan(&held)
	if err == nil && held {
		_, err = conn.Exec(ctx, fmt.Sprintf(`SET lock_timeout = %d; SET statement_timeout = %d; SET max_parallel_maintenance_workers = 0`,
			max(lockTimeout.Milliseconds(), 1), ReindexStatementTimeout.Milliseconds()))
	}
	if err != nil || !held {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, interpretError("index maintenance: lock", err)
	}
	return &IndexMaintenance{conn: conn}, nil
}

// Close releases the advisory lock and ends the session. The lock is let
// go by a statement, not left to the session's end: Postgres ends a
// closed connection's process in its own time, and until it has, the
// next pass of this reaper (or another's) would find the key held and
// skip. An unlock that fails (a broken connection) is not an error: the
// lock then goes with the session.
func (m *IndexMaintenance) Close(ctx context.Context) error {
	_, _ = m.conn.Exec(ctx, `SELECT pg_advisory_unlock(`+ReindexLockKey+`)`)
	return m.conn.Close(ctx)
}

// IndexSizes lists the jobs table's B-tree indexes (indexSizesSQL).
func (m *IndexMaintenance) IndexSizes(ctx context.Context) ([]IndexSize, error) {
	rows, err := m.conn.Query(ctx, indexSizesSQL)
	if err != nil {
		return nil, interpretError("index sizes", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (IndexSize, error) {
		var s IndexSize
		err := r.Scan(&s.Schema, &s.Name, &s.Bytes, &s.Entries, &s.TableBytes, &s.TableCounted, &s.TableLive, &s.TableDead, &s.Partial, &s.KeyWidth)
		return s, err
	})
	return out, interpretError("index sizes", err)
}

// Obstacle is what would make a rebuild wait if it started now.
type Obstacle struct {
	// Vacuum is a vacuum of the jobs table in progress: the rebuild's
	// lock and the vacuum's exclude each other.
	Vacuum bool
	// Analyze is an analyze of the jobs table in progress, which takes the
	// same lock: an autovacuum analyzes the table right after vacuuming
	// it, and Postgres cancels that analyze (and with it the table's fresh
	// statistics) when a rebuild waits for its lock.
	Analyze bool
	// Snapshot is how long the oldest other transaction of this database
	// holding a snapshot has been open: a rebuild waits for every
	// snapshot older than each of its phases.
	Snapshot time.Duration
	// Vacuums counts the vacuums of the jobs table that have ended (by
	// hand and by autovacuum), since Postgres last reset its statistics.
	Vacuums int64
	// Heap is the size of the jobs table's heap in bytes. A long snapshot
	// grows it many times over, a vacuum gives it back only from its end
	// (ADR-0074), and until then every vacuum of the table is as long
	// (ADR-0077).
	Heap int64
}

// Obstacle reads what would make a rebuild wait now (obstacleSQL).
func (m *IndexMaintenance) Obstacle(ctx context.Context) (Obstacle, error) {
	return scanObstacle(m.conn.QueryRow(ctx, obstacleSQL))
}

// ReindexObstacle reads the same as IndexMaintenance.Obstacle on a pool
// connection, without the reindex lock: a reaper whose pass found the
// lock held elsewhere still follows the table's snapshots and vacuums, so
// that it knows what the holder knew should it take the lock over.
func (s *Store) ReindexObstacle(ctx context.Context) (Obstacle, error) {
	return scanObstacle(s.pool.QueryRow(ctx, obstacleSQL))
}

func scanObstacle(row pgx.Row) (Obstacle, error) {
	var o Obstacle
	var vacuums, analyzes int64
	var openSeconds float64
	if err := row.Scan(&vacuums, &analyzes, &o.Vacuums, &o.Heap, &openSeconds); err != nil {
		return o, interpretError("index maintenance: obstacles", err)
	}
	o.Vacuum, o.Analyze = vacuums > 0, analyzes > 0
	o.Snapshot = time.Duration(openSeconds * float64(time.Second))
	return o, nil
}

// DropLeftovers drops the invalid indexes failed rebuilds left on the jobs
// table (leftoversSQL), each with DROP INDEX CONCURRENTLY, and returns the
// names it dropped. It goes on past one it could not drop.
func (m *IndexMaintenance) DropLeftovers(ctx context.Context) ([]string, error) {
	rows, err := m.conn.Query(ctx, leftoversSQL)
	if err != nil {
		return nil, interpretError("index leftovers", err)
	}
	names, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgx.Identifier, error) {
		var schema, name string
		err := r.Scan(&schema, &name)
		return pgx.Identifier{schema, name}, err
	})
	if err != nil {
		return nil, interpretError("index leftovers", err)
	}
	var dropped []string
	var errs []error
	for _, name := range names {
		if _, err := m.conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+name.Sanitize()); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", name[1], err))
			continue
		}
		dropped = append(dropped, name[1])
	}
	return dropped, interpretError("index leftovers", errors.Join(errs...))
}

// Rebuild rebuilds one index of the jobs table with REINDEX INDEX
// CONCURRENTLY: writes and claims go on while it reads the table twice,
// and the rebuilt index takes the old one's name and constraint. It
// returns the index's size after. A rebuild that fails part-way leaves an
// invalid leftover for DropLeftovers. An index that is not one of the jobs
// table's is refused before anything runs.
func (m *IndexMaintenance) Rebuild(ctx context.Context, schema, name string) (int64, error) {
	notOurs := fmt.Errorf("reindex %q: not an index of the jobs table", name)
	if !identifier(schema) || !identifier(name) {
		return 0, notOurs
	}
	ident := pgx.Identifier{schema, name}.Sanitize()
	var ours bool
	if err := m.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($1) AND indrelid = 'jobs'::regclass)`,
		ident).Scan(&ours); err != nil {
		return 0, interpretError("reindex "+name, err)
	}
	if !ours {
		return 0, notOurs
	}
	if _, err := m.conn.Exec(ctx, `REINDEX INDEX CONCURRENTLY `+ident); err != nil {
		return 0, interpretError("reindex "+name, err)
	}
	var bytes int64
	err := m.conn.QueryRow(ctx, `SELECT pg_relation_size(to_regclass($1))`, ident).Scan(&bytes)
	return bytes, interpretError("reindex "+name, err)
}

// identifier reports whether s can name a Postgres object as it is: valid
// UTF-8 without NUL (which pgx.Identifier would drop, naming another
// object), and not empty.
func identifier(s string) bool {
	return s != "" && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
