package jobstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// The schema's ways of deleting a job's rows in other tables, for the
// benchmarks to compare in one run, each on a database of its own:
// "triggers" is the schema as it is (ADR-0058 and ADR-0068: one statement
// trigger per DELETE); "uniques key" puts job_uniques' ON DELETE CASCADE
// foreign key back (the schema between the two ADRs); "keys" puts all four
// keys back (the schema before ADR-0058).
const (
	restoreUniquesKey = `
		DROP TRIGGER job_uniques_job_id_fkey ON job_uniques;
		DROP TRIGGER job_uniques_job_id_fkey_update ON job_uniques;
		DELETE FROM job_uniques u WHERE NOT EXISTS (SELECT FROM jobs j WHERE j.id = u.job_id);
		ALTER TABLE job_uniques ADD CONSTRAINT job_uniques_job_id_fkey
		    FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE;`
	restoreOtherKeys = `
		DROP TRIGGER jobs_delete_references ON jobs;
		DROP TRIGGER jobs_truncate_references ON jobs;
		DROP TRIGGER job_dependencies_jobs_fkey ON job_dependencies;
		DROP TRIGGER job_replacements_job_id_fkey ON job_replacements;
		ALTER TABLE job_replacements ADD CONSTRAINT job_replacements_job_id_fkey
		    FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE;
		ALTER TABLE job_dependencies ADD CONSTRAINT job_dependencies_child_id_fkey
		    FOREIGN KEY (child_id) REFERENCES jobs(id) ON DELETE CASCADE;
		ALTER TABLE job_dependencies ADD CONSTRAINT job_dependencies_parent_id_fkey
		    FOREIGN KEY (parent_id) REFERENCES jobs(id) ON DELETE CASCADE;`
)

// referenceVariants are the benchmarks' schemas, by name, with the SQL that
// makes each from the current one.
var referenceVariants = []struct{ name, sql string }{
	{"triggers", ""},
	{"uniques key", restoreUniquesKey},
	{"keys", restoreUniquesKey + restoreOtherKeys},
}

// referencePool is a pool on a database of its own with the variant's
// schema.
func referencePool(b *testing.B, sql string) *pgxpool.Pool {
	b.Helper()
	pool := newPool(b)
	if sql != "" {
		_, err := pool.Exec(ctx, sql)
		require.NoError(b, err)
	}
	return pool
}

// BenchmarkRetentionDelete is the retention's DELETE of a batch of finished
// jobs (DeleteFinished, the reaper's statement) under each variant of
// referenceVariants. The jobs are made and finished outside the timing;
// none has a row in another table, as almost none has in production, so
// the differences are what every deleted job paid for rows it did not
// have.
//
//	go test ./jobstore -run '^$' -bench BenchmarkRetentionDelete -benchtime 30x -count 3
func BenchmarkRetentionDelete(b *testing.B) {
	const batch = 1000
	for _, variant := range referenceVariants {
		b.Run(variant.name, func(b *testing.B) {
			store := newStore(b, referencePool(b, variant.sql))
			finish := func() {
				jobs := make([]pulsetype.NewJob, batch)
				for k := range jobs {
					jobs[k] = newJob("bench.retention", 5)
				}
				_, err := store.Insert(ctx, jobs)
				require.NoError(b, err)
				claimed, err := store.Claim(ctx, []string{"bench.retention"}, slots("w", batch), ttl)
				require.NoError(b, err)
				require.Len(b, claimed, batch)
				rs := make([]pulsetype.Result, batch)
				for k, c := range claimed {
					rs[k] = pulsetype.Result{Ref: pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: pulsetype.OutcomeComplete, Worker: "w"}
				}
				_, err = store.Report(ctx, "w", rs)
				require.NoError(b, err)
			}
			var spent time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				finish()
				b.StartTimer()
				start := time.Now()
				n, err := store.DeleteFinished(ctx, pulsetype.StatusCompleted, 0, batch)
				spent += time.Since(start)
				require.NoError(b, err)
				require.EqualValues(b, batch, n)
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N*batch), "ns/deleted-job")
		})
	}
}

// BenchmarkUniqueInsert is a submit of unique jobs (each claims its key in
// job_uniques in the insert's statement, ADR-0016) under the schema as it
// is, whose key check is a constraint trigger (ADR-0068), and with the
// foreign key it replaced: what moving the check cost the unique submit.
//
//	go test ./jobstore -run '^$' -bench BenchmarkUniqueInsert -benchtime 200x -count 3
func BenchmarkUniqueInsert(b *testing.B) {
	const batch = 100
	for _, variant := range referenceVariants[:2] {
		b.Run(variant.name, func(b *testing.B) {
			store := newStore(b, referencePool(b, variant.sql))
			n := 0
			b.ResetTimer()
			for range b.N {
				jobs := make([]pulsetype.NewJob, batch)
				for k := range jobs {
					n++
					jobs[k] = uniqueJob("bench.unique", fmt.Sprintf(`{"n":%d}`, n), time.Hour)
				}
				res, err := store.Insert(ctx, jobs)
				require.NoError(b, err)
				require.False(b, res[0].Duplicate)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/unique-job")
		})
	}
}
