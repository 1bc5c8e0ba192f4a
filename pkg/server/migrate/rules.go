package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/pressly/goose/v3"
)

// The rules every migration after the baseline follows on the jobs table
// (migrations/README.md), checked by CheckRules:
//
//   - an index on jobs is built (and dropped) CONCURRENTLY, in a
//     `-- +goose NO TRANSACTION` migration: a plain CREATE INDEX holds a
//     SHARE lock for the whole build, which stops every claim, report and
//     submit;
//   - an ALTER TABLE jobs runs in a transactional migration that sets its
//     own `SET LOCAL lock_timeout` before it, so it gives up (and is
//     retried) rather than queueing the workload behind its ACCESS
//     EXCLUSIVE request, however the file is applied.
//
// The baseline (version 1) runs on an empty database and is not checked.
var (
	createIndexOnJobs = regexp.MustCompile(`(?is)^CREATE\s+(UNIQUE\s+)?INDEX\b.*?\bON\s+(ONLY\s+)?("?public"?\.)?"?jobs"?[\s(]`)
	dropJobsIndex     = regexp.MustCompile(`(?is)^DROP\s+INDEX\b.*?\bjobs_`)
	concurrently      = regexp.MustCompile(`(?i)\bCONCURRENTLY\b`)
	alterJobs         = regexp.MustCompile(`(?is)^ALTER\s+TABLE\s+(IF\s+EXISTS\s+)?(ONLY\s+)?("?public"?\.)?"?jobs"?(\s|$)`)
	setLocalLockTO    = regexp.MustCompile(`(?is)^SET\s+LOCAL\s+lock_timeout\b`)
	noTransaction     = regexp.MustCompile(`(?m)^--\s*\+goose\s+NO\s+TRANSACTION\s*$`)
	gooseDown         = regexp.MustCompile(`(?m)^--\s*\+goose\s+Down\b`)
	lineComment       = regexp.MustCompile(`--[^\n]*`)
	dollarQuoted      = regexp.MustCompile(`(?s)\$([A-Za-z_]*)\$.*?\$([A-Za-z_]*)\$`)
)

// CheckRules reads every migration in fsys after the baseline and returns
// an error naming each file and statement that breaks a rule above, or
// nil.
func CheckRules(fsys fs.FS) error {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	var problems []string
	for _, name := range names {
		version, err := goose.NumericComponent(path.Base(name))
		if err != nil || version <= 1 {
			continue
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		for _, p := range checkFile(string(b)) {
			problems = append(problems, name+": "+p)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("migrations break the rules for live tables (migrations/README.md):\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

func checkFile(sql string) []string {
	noTx := noTransaction.MatchString(sql)
	if loc := gooseDown.FindStringIndex(sql); loc != nil {
		sql = sql[:loc[0]] // Down runs by hand, on purpose; Up runs live
	}
	sql = lineComment.ReplaceAllString(sql, "")
	sql = dollarQuoted.ReplaceAllString(sql, "$$$$")
	var problems []string
	guarded := false
	for _, stmt := range strings.Split(sql, ";") {
		stmt = strings.TrimSpace(stmt)
		short := strings.Join(strings.Fields(stmt), " ")
		if len(short) > 80 {
			short = short[:80] + "…"
		}
		switch {
		case setLocalLockTO.MatchString(stmt):
			guarded = true
		case createIndexOnJobs.MatchString(stmt) || dropJobsIndex.MatchString(stmt):
			if !concurrently.MatchString(stmt) {
				problems = append(problems, fmt.Sprintf("%q: an index on jobs is built and dropped CONCURRENTLY", short))
			} else if !noTx {
				problems = append(problems, fmt.Sprintf("%q: CONCURRENTLY needs a `-- +goose NO TRANSACTION` migration", short))
			}
		case alterJobs.MatchString(stmt):
			if noTx {
				problems = append(problems, fmt.Sprintf("%q: ALTER TABLE jobs goes in a transactional migration with SET LOCAL lock_timeout, not a NO TRANSACTION one", short))
			} else if !guarded {
				problems = append(problems, fmt.Sprintf("%q: ALTER TABLE jobs without a SET LOCAL lock_timeout before it", short))
			}
		}
	}
	return problems
}
