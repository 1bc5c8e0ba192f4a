package scenario

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat. It
// is 100 on every Linux architecture Go supports (the kernel's HZ may
// differ; what /proc reports is scaled to USER_HZ).
const clockTicks = 100

// StatsSettle is how long the meter waits after a run before it reads
// Postgres's cumulative statistics (pg_stat_database, pg_stat_wal,
// pg_stat_user_tables). PostgreSQL 15 backends flush their counters at
// most once a second while busy and, once idle, only after
// PGSTAT_IDLE_INTERVAL (10 s): the pools of the services stay connected,
// so a read right after the run misses their last second of work. WAL
// bytes do not wait: they are the difference of pg_current_wal_lsn().
const StatsSettle = 11 * time.Second

// Meter measures one run from outside: CPU seconds of each process of the
// system under test (from /proc), the whole machine's idle share, and
// optionally what Postgres wrote (WAL, transactions, row versions).
type Meter struct {
	pids    map[string]int // process name → pid; "postgres" is the postmaster
	db      string         // a database URL on the cluster, "" for no database counters
	table   string         // the queue table whose tuple counters to read ("" for none)
	tableDB string         // the database holding table
	start   cpuSample
	startDB dbSample
	begunAt time.Time
	walDir  string
	wal     []WALRecord
}

// MeterOptions choose what a Meter reads besides CPU.
type MeterOptions struct {
	// DatabaseURL is any database of the cluster: WAL position and the
	// cluster-wide counters are read through it. Empty: CPU only.
	DatabaseURL string
	// Table and TableDatabaseURL name the queue table (jobs, river_job)
	// whose inserted/updated/HOT-updated row counters are read.
	Table, TableDatabaseURL string
	// WALDataDir, when set, is the cluster's data directory: Stop then
	// breaks the run's WAL down by record type (pg_waldump; see WAL).
	WALDataDir string
}

// StartMeter samples the starting point. pids are the processes to
// account (Fleet.PIDs(): each service by name, the postmaster as
// "postgres"); this process is always accounted as "load".
func StartMeter(ctx context.Context, pids map[string]int, o MeterOptions) (*Meter, error) {
	m := &Meter{pids: pids, db: o.DatabaseURL, table: o.Table, tableDB: o.TableDatabaseURL, walDir: o.WALDataDir}
	if m.tableDB == "" {
		m.tableDB = m.db
	}
	var err error
	if m.db != "" {
		if m.startDB, err = m.readDB(ctx); err != nil {
			return nil, err
		}
	} else {
		m.walDir = ""
	}
	m.start = m.readCPU()
	m.begunAt = time.Now()
	return m, nil
}

// Stop samples the end point and returns the run's costs per job. jobs is
// how many jobs the run processed; settle is how long to wait before
// reading Postgres's cumulative statistics (0 skips them: only CPU and WAL
// bytes are reported).
func (m *Meter) Stop(ctx context.Context, jobs int, settle time.Duration) (map[string]float64, error) {
	end := m.readCPU()
	out := map[string]float64{}
	per100k := 100000 / float64(jobs)
	var total float64
	groups := map[string]float64{}
	for name, s := range end.procs {
		d := s - m.start.procs[name]
		total += d
		switch {
		case name == "postgres":
			groups["postgres"] += d
		case strings.HasPrefix(name, "dispatch-gateway"):
			groups["gateways"] += d
			out["cpu_s_per_100k_"+gatewayKey(name)] = d * per100k
		case name == "control-api":
			groups["control_api"] += d
		case name == "load":
			groups["load"] += d
		default:
			groups[strings.ReplaceAll(name, "-", "_")] += d
		}
	}
	for g, d := range groups {
		out["cpu_s_per_100k_"+g] = d * per100k
	}
	out["cpu_s_per_100k_total"] = total * per100k
	if busy, all := end.machineBusy-m.start.machineBusy, end.machineAll-m.start.machineAll; all > 0 {
		out["machine_idle_pct"] = 100 * float64(all-busy) / float64(all)
		// What the measured processes used of the machine; the rest of the
		// busy share is someone else (on a shared machine) or the kernel.
		wall := end.at.Sub(m.start.at).Seconds()
		out["measured_cpu_pct_of_machine"] = 100 * total / (wall * float64(runtime.NumCPU()))
	}
	if m.db == "" {
		return out, nil
	}
	lsn, err := currentLSN(ctx, m.db)
	if err != nil {
		return nil, err
	}
	out["wal_bytes_per_job"] = float64(lsn-m.startDB.lsn) / float64(jobs)
	if m.walDir != "" {
		if m.wal, err = WALBreakdown(ctx, m.walDir, m.startDB.lsn, lsn, jobs); err != nil {
			return nil, err
		}
	}
	if settle <= 0 {
		return out, nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(settle):
	}
	d, err := m.readDB(ctx)
	if err != nil {
		return nil, err
	}
	s := m.startDB
	f := func(a, b int64) float64 { return float64(a-b) / float64(jobs) }
	out["xacts_per_job"] = f(d.xacts, s.xacts)
	// Buffer accesses are the database's work counted, not timed: unlike
	// CPU seconds they do not move with the machine's speed or a
	// neighbour's load, so they compare two queues' Postgres work per job
	// even when the rates of one run are noise.
	out["buffers_per_job"] = f(d.buffers, s.buffers)
	out["wal_records_per_job"] = f(d.walRecords, s.walRecords)
	out["wal_fpi_per_job"] = f(d.walFPI, s.walFPI)
	if d.statements >= 0 && s.statements >= 0 {
		out["statements_per_job"] = f(d.statements, s.statements)
	}
	if m.table != "" {
		out["rows_inserted_per_job"] = f(d.tupIns, s.tupIns)
		out["rows_updated_per_job"] = f(d.tupUpd, s.tupUpd)
		if upd := d.tupUpd - s.tupUpd; upd > 0 {
			out["hot_update_pct"] = 100 * float64(d.tupHot-s.tupHot) / float64(upd)
		}
	}
	return out, nil
}

// WAL is the run's WAL by record type, per job, once Stop has run with
// MeterOptions.WALDataDir set.
func (m *Meter) WAL() []WALRecord { return m.wal }

// gatewayKey turns dispatch-gateway-2 into gateway_2.
func gatewayKey(name string) string {
	return "gateway_" + strings.TrimPrefix(strings.TrimPrefix(name, "dispatch-gateway"), "-")
}

type cpuSample struct {
	at                      time.Time
	procs                   map[string]float64 // CPU seconds so far
	machineBusy, machineAll uint64             // /proc/stat ticks
}

func (m *Meter) readCPU() cpuSample {
	s := cpuSample{at: time.Now(), procs: map[string]float64{}}
	for name, pid := range m.pids {
		if name == "postgres" {
			s.procs[name] = postgresCPU(pid)
			continue
		}
		if st, ok := readStat(pid); ok {
			s.procs[name] = st.self()
		}
	}
	if st, ok := readStat(os.Getpid()); ok {
		s.procs["load"] = st.self()
	}
	s.machineBusy, s.machineAll = machineTicks()
	return s
}

// procStat holds the fields of /proc/<pid>/stat we use, in seconds.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime float64
}

func (p procStat) self() float64 { return p.utime + p.stime }

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	// The command name is parenthesised and may hold spaces; the fields
	// after it start with the state (field 3).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return procStat{}, false
	}
	num := func(k int) float64 { // k is the field number of proc(5), from 1
		v, _ := strconv.ParseFloat(f[k-3], 64)
		return v / clockTicks
	}
	ppid, _ := strconv.Atoi(f[4-3])
	return procStat{ppid: ppid, utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}, true
}

// postgresCPU is the CPU time of a whole cluster: the postmaster itself,
// every live child (backends, checkpointer, WAL writer, autovacuum...),
// and the children that already exited (the postmaster's cutime and
// cstime, added when it reaped them), so a backend that connected and
// left between two samples still counts.
//
// A child reaped while /proc is being walked would be in neither sum (its
// /proc entry gone, the postmaster's cutime read before), which happens
// when a run ends by closing its pools: so the walk is repeated until the
// postmaster reaped nothing during it. (A child that exited but is not
// reaped yet is a zombie whose /proc/<pid>/stat still has its times.)
func postgresCPU(postmaster int) float64 {
	var total float64
	for range 10 {
		before, ok := readStat(postmaster)
		if !ok {
			return 0
		}
		total = before.self() + before.cutime + before.cstime
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == postmaster {
				continue
			}
			if st, ok := readStat(pid); ok && st.ppid == postmaster {
				total += st.self()
			}
		}
		after, ok := readStat(postmaster)
		if ok && after.cutime == before.cutime && after.cstime == before.cstime {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return total
}

// machineTicks returns the busy and total ticks of all CPUs (/proc/stat's
// first line; idle and iowait count as not busy).
func machineTicks() (busy, all uint64) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 6 || fields[0] != "cpu" {
		return 0, 0
	}
	var idle uint64
	for i, v := range fields[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i >= 8 { // guest and guest_nice are already inside user and nice
			break
		}
		all += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return all - idle, all
}

type dbSample struct {
	lsn                    int64
	xacts                  int64
	buffers                int64 // shared-buffer accesses, hits and reads
	walRecords, walFPI     int64
	statements             int64 // -1 without pg_stat_statements
	tupIns, tupUpd, tupHot int64
}

func currentLSN(ctx context.Context, url string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var lsn int64
	err = conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&lsn)
	return lsn, err
}

func (m *Meter) readDB(ctx context.Context) (dbSample, error) {
	var s dbSample
	conn, err := pgx.Connect(ctx, m.db)
	if err != nil {
		return s, err
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `
		SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		       (SELECT sum(xact_commit)::bigint FROM pg_stat_database),
		       (SELECT sum(blks_hit + blks_read)::bigint FROM pg_stat_database),
		       w.wal_records, w.wal_fpi
		FROM pg_stat_wal AS w`).Scan(&s.lsn, &s.xacts, &s.buffers, &s.walRecords, &s.walFPI); err != nil {
		return s, fmt.Errorf("meter: %w", err)
	}
	s.statements = -1
	var has bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements')`).Scan(&has); err == nil && has {
		if err := conn.QueryRow(ctx, `SELECT COALESCE(sum(calls), 0)::bigint FROM pg_stat_statements`).Scan(&s.statements); err != nil {
			s.statements = -1
		}
	}
	if m.table == "" {
		return s, nil
	}
	tconn := conn
	if m.tableDB != m.db {
		if tconn, err = pgx.Connect(ctx, m.tableDB); err != nil {
			return s, err
		}
		defer tconn.Close(ctx)
	}
	err = tconn.QueryRow(ctx, `
		SELECT COALESCE(sum(n_tup_ins), 0)::bigint, COALESCE(sum(n_tup_upd), 0)::bigint, COALESCE(sum(n_tup_hot_upd), 0)::bigint
		FROM pg_stat_user_tables WHERE relname = $1`, m.table).Scan(&s.tupIns, &s.tupUpd, &s.tupHot)
	if err != nil {
		return s, fmt.Errorf("meter: table counters: %w", err)
	}
	return s, nil
}

// EnableStatements creates the pg_stat_statements extension when the
// library is preloaded, so the meter can count statements (calls) per job;
// it reports whether it is available.
func EnableStatements(ctx context.Context, url string) bool {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	var libs string
	if err := conn.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries')`).Scan(&libs); err != nil || !strings.Contains(libs, "pg_stat_statements") {
		return false
	}
	_, err = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return err == nil
}
