package scenario

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/pulsequeue/pulse/pkg/server/pgcluster"
)

// WALRecord is one record type's share of a run's WAL, per job.
type WALRecord struct {
	Type           string  // rmgr/record, as pg_waldump names it (Heap/UPDATE)
	PerJob         float64 // records per job
	BytesPerJob    float64 // record and full-page-image bytes per job
	FPIBytesPerJob float64
}

var parenthesised = regexp.MustCompile(`\([^)]*\)`)

// WALBreakdown runs pg_waldump --stats=record over [start, end) of the
// cluster's WAL (dataDir/pg_wal) and returns each record type's count and
// bytes per job, largest first. The segments must still be there: run the
// cluster with wal_keep_size above a run's WAL (pulse-load -wal-stats does).
func WALBreakdown(ctx context.Context, dataDir string, start, end int64, jobs int) ([]WALRecord, error) {
	bin, err := waldumpPath()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "--stats=record",
		"--path="+filepath.Join(dataDir, "pg_wal"), "--start="+lsnText(start), "--end="+lsnText(end))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("pg_waldump: %w: %s", err, strings.TrimSpace(errOut.String()))
	}
	var recs []WALRecord
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		// Type N (%) Record size (%) FPI size (%) Combined size (%)
		f := strings.Fields(parenthesised.ReplaceAllString(sc.Text(), ""))
		if len(f) != 5 || !strings.Contains(f[0], "/") {
			continue
		}
		var n [4]float64
		ok := true
		for i := range n {
			v, err := strconv.ParseFloat(f[i+1], 64)
			if err != nil {
				ok = false
				break
			}
			n[i] = v
		}
		if !ok || n[0] == 0 {
			continue
		}
		j := float64(jobs)
		recs = append(recs, WALRecord{Type: f[0], PerJob: n[0] / j, BytesPerJob: n[3] / j, FPIBytesPerJob: n[2] / j})
	}
	sort.Slice(recs, func(a, b int) bool { return recs[a].BytesPerJob > recs[b].BytesPerJob })
	return recs, sc.Err()
}

// FormatWAL renders a breakdown on one line, the types that write at least
// 1 % of the bytes.
func FormatWAL(recs []WALRecord) string {
	var total float64
	for _, r := range recs {
		total += r.BytesPerJob
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%.0f B/job:", total)
	for _, r := range recs {
		if r.BytesPerJob < total/100 {
			continue
		}
		fmt.Fprintf(&b, " %s %.2f×%.0fB", r.Type, r.PerJob, r.BytesPerJob/r.PerJob)
		if r.FPIBytesPerJob > 0 {
			fmt.Fprintf(&b, "(fpi %.0fB/job)", r.FPIBytesPerJob)
		}
		b.WriteString(",")
	}
	return strings.TrimSuffix(b.String(), ",")
}

// waldumpPath finds pg_waldump: on PATH, beside the pg_ctl the clusters
// use, or in the newest /usr/lib/postgresql/*/bin.
func waldumpPath() (string, error) {
	if p, err := exec.LookPath("pg_waldump"); err == nil {
		return p, nil
	}
	var dirs []string
	if d, err := pgcluster.BinDir(); err == nil {
		dirs = append(dirs, d)
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(matches)))
	for _, d := range append(dirs, matches...) {
		p := filepath.Join(d, "pg_waldump")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("pg_waldump not found (PATH, %v)", dirs)
}

func lsnText(lsn int64) string {
	return fmt.Sprintf("%X/%X", uint64(lsn)>>32, uint64(lsn)&0xffffffff)
}
