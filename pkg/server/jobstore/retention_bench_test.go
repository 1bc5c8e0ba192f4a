package jobstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// BenchmarkRetentionDelete is the retention's DELETE of a batch of finished
// jobs (DeleteFinished, the reaper's statement), with a job's dependency
// and replacement rows deleted by the schema's statement trigger (ADR-0058,
// "triggers") and, for comparison in the same run, by the ON DELETE
// CASCADE foreign keys it replaced ("keys": the keys put back and the
// triggers dropped on a database of its own). The jobs are made and
// finished outside the timing; none has such rows, as almost none has in
// production, so the difference is what every deleted job paid for rows
// it did not have.
//
//	go test ./jobstore -run '^$' -bench BenchmarkRetentionDelete -benchtime 30x -count 3
func BenchmarkRetentionDelete(b *testing.B) {
	const batch = 1000
	for _, variant := range []string{"triggers", "keys"} {
		b.Run(variant, func(b *testing.B) {
			pool := newPool(b)
			if variant == "keys" {
				_, err := pool.Exec(ctx, `
					DROP TRIGGER jobs_delete_references ON jobs;
					DROP TRIGGER jobs_truncate_references ON jobs;
					DROP TRIGGER job_dependencies_jobs_fkey ON job_dependencies;
					DROP TRIGGER job_replacements_job_id_fkey ON job_replacements;
					ALTER TABLE job_replacements ADD CONSTRAINT job_replacements_job_id_fkey
					    FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE;
					ALTER TABLE job_dependencies ADD CONSTRAINT job_dependencies_child_id_fkey
					    FOREIGN KEY (child_id) REFERENCES jobs(id) ON DELETE CASCADE;
					ALTER TABLE job_dependencies ADD CONSTRAINT job_dependencies_parent_id_fkey
					    FOREIGN KEY (parent_id) REFERENCES jobs(id) ON DELETE CASCADE`)
				require.NoError(b, err)
			}
			store := newStore(b, pool)
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
