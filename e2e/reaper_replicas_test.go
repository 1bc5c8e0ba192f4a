package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
)

// reaperEnv makes each sweep many small statements, run often, so the
// replicas' sweeps overlap on the expired set rather than one replica
// taking it all in one go.
var reaperEnv = map[string]string{"PULSE_SWEEP_BATCH": "10", "PULSE_SWEEP_INTERVAL": "20ms"}

// TestReaperReplicasReapEachLapseOnce runs two, then three reaper processes
// over the same expired leases: 300 RUNNING jobs, written straight into the
// table (born and claimed in one transaction), whose leases lapse at one instant while every replica sweeps in
// small batches. Each lapse must be settled exactly once: attempts are not
// touched by the reap, the history gains one "worker lease expired" entry
// naming the worker, and the replicas' counters add up to the set.
// Then each job is claimed again (as a gateway would) and lapses a second
// time, which must add exactly one more entry.
func TestReaperReplicasReapEachLapseOnce(t *testing.T) {
	t.Parallel()
	f := upChaosFleet(t, localfleet.Options{Gateways: 1, Reaper: true}, reaperEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()

	reapers := []string{f.AdminURLs[localfleet.Reaper]}
	const jobs = 300
	for _, replicas := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dReplicas", replicas), func(t *testing.T) {
			for len(reapers) < replicas {
				reapers = append(reapers, startReaper(t, f, len(reapers)+1))
			}
			topic := fmt.Sprintf("reap.replicas-%d", replicas)
			// One job in ten is on its last attempt, so its lapse dead-letters it.
			// A job is born PENDING (migration 00005), so each is inserted and
			// claimed by its ghost in one transaction: nothing sees it unclaimed.
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `
					INSERT INTO jobs (id, topic, max_attempts)
					SELECT gen_random_uuid(), $1, CASE WHEN i % 10 = 0 THEN 1 ELSE 5 END
					FROM generate_series(1, $2::int) AS i`, topic, jobs); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `
					UPDATE jobs AS j SET status = 'RUNNING', attempts = 1, locked_by = 'ghost-' || (n.i % 7),
					       lease_until = now() + interval '300 milliseconds', started_at = now()
					FROM (SELECT id, row_number() OVER () AS i FROM jobs WHERE topic = $1) AS n
					WHERE j.id = n.id`, topic)
				return err
			})
			require.NoError(t, err)
			awaitReaped(t, ctx, pool, topic)
			requireReapedOnce(t, ctx, pool, topic, jobs, 1)
			require.Equal(t, float64(jobs), reapedCount(t, ctx, reapers, topic), "the replicas' reap counters add up to one reap per job")

			// The second lapse: claim every retried job again, as a gateway
			// would (attempts+1, a new owner), and let it lapse too.
			_, err = pool.Exec(ctx, `
				UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1, locked_by = 'second-owner',
				       lease_until = now() + interval '300 milliseconds', started_at = now()
				WHERE topic = $1 AND status = 'RETRYING'`, topic)
			require.NoError(t, err)
			awaitReaped(t, ctx, pool, topic)
			requireReapedOnce(t, ctx, pool, topic, jobs, 2)
			require.Equal(t, float64(jobs+jobs*9/10), reapedCount(t, ctx, reapers, topic), "one reap per lapse")
		})
	}
}

// startReaper runs one more reaper process against f, configured like the
// fleet's own; the fleet stops it with the rest. It returns its admin URL.
func startReaper(t *testing.T, f *localfleet.Fleet, n int) string {
	t.Helper()
	port, err := localfleet.FreePort()
	require.NoError(t, err)
	admin := "127.0.0.1:" + strconv.Itoa(port)
	env := []string{"PULSE_DATABASE_URL=" + f.DatabaseURL, "PULSE_ADMIN_ADDR=" + admin}
	for k, v := range chaosEnv(reaperEnv) {
		env = append(env, k+"="+v)
	}
	name := fmt.Sprintf("%s-%d", localfleet.Reaper, n)
	p, err := localfleet.Start(t.Context(), name, binaries(t)[localfleet.Reaper], env, f.LogDir)
	require.NoError(t, err)
	// Down stops it in order with the fleet and reports an unclean exit.
	f.Processes = append(f.Processes, p)
	f.AdminURLs[name] = "http://" + admin
	ctx, cancel := context.WithTimeout(context.Background(), localfleet.ReadyTimeoutDefault)
	defer cancel()
	require.NoError(t, localfleet.WaitHTTP(ctx, f.AdminURLs[name]+"/readyz"), "%s not ready:\n%s", name, p.Logs())
	return f.AdminURLs[name]
}

// awaitReaped waits until no job of topic is RUNNING.
func awaitReaped(t *testing.T, ctx context.Context, pool *pgxpool.Pool, topic string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var running int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = $1 AND status = 'RUNNING'`, topic).Scan(&running)
		return err == nil && running == 0
	}, recoveryTimeout, 20*time.Millisecond, "leases of %s were never reaped", topic)
}

// requireReapedOnce checks that each of the jobs of topic has lapsed
// exactly lapses times (once, if the first lapse dead-lettered it):
// attempts equals the lapses, because a reap never moves it, and the
// history holds one lease-expired entry per lapse, for that lapse's
// attempt and owner.
func requireReapedOnce(t *testing.T, ctx context.Context, pool *pgxpool.Pool, topic string, jobs, lapses int) {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT id::text, status, attempts, max_attempts, errors FROM jobs WHERE topic = $1`, topic)
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, status string
		var attempts, maxAttempts int
		var history []byte
		require.NoError(t, rows.Scan(&id, &status, &attempts, &maxAttempts, &history))
		var errs []attemptError
		require.NoError(t, json.Unmarshal(history, &errs))
		n++

		want, wantStatus := lapses, "RETRYING"
		if maxAttempts == 1 {
			want, wantStatus = 1, "DEAD_LETTERED" // its first lapse was its last attempt
		}
		require.Equal(t, wantStatus, status, "job %s", id)
		require.Equal(t, want, attempts, "job %s: a reap moved attempts", id)
		require.Len(t, errs, want, "job %s: not one history entry per lapse: %+v", id, errs)
		for i, e := range errs {
			require.Equal(t, i+1, e.Attempt, "job %s: %+v", id, errs)
			require.Equal(t, leaseExpired, e.Error, "job %s: %+v", id, errs)
		}
		require.Regexp(t, `^ghost-\d$`, errs[0].Worker, "job %s: the first lapse names the first owner", id)
		if want == 2 {
			require.Equal(t, "second-owner", errs[1].Worker, "job %s: the second lapse names the second owner", id)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, jobs, n)
}

// reapedCount adds pulse_jobs_reaped_total for topic over every replica.
func reapedCount(t *testing.T, ctx context.Context, reapers []string, topic string) float64 {
	t.Helper()
	var sum float64
	for _, url := range reapers {
		n := mustScrapeSum(t, ctx, url, "pulse_jobs_reaped_total", `topic="`+topic+`"`)
		t.Logf("%s reaped %v jobs of %s", url, n, topic)
		sum += n
	}
	return sum
}
