package e2e_test

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// leaseExpired is the reaper's entry in a job's error history.
const leaseExpired = "worker lease expired"

// The SDK's log lines the zombie test looks for: the gateway answered a
// heartbeat "lease not held"; no renewal succeeded for a TTL; the gateway
// refused a result.
const (
	logLeaseLost         = "lease lost, stopping its handler"
	logLeasePresumedLost = "lease presumed lost: not renewed within the lease TTL"
	logResultRejected    = "result rejected"
)

// jobHeld is who holds a job, for comparing in one assertion.
type jobHeld struct {
	Status   string
	LockedBy string
	Attempts int
}

// TestRecoveryFromWorkerFailures runs worker processes that die or freeze
// mid-job against one fleet (two gateways, a reaper, two-second leases):
// the job is always finished by another worker, and the failed attempt is
// in its history.
func TestRecoveryFromWorkerFailures(t *testing.T) {
	t.Parallel()
	f := upChaosFleet(t, localfleet.Options{Gateways: 2, Reaper: true}, nil)
	// No deadline here: the parallel subtests may start minutes later,
	// once the package's other tests free a slot; each sets its own.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	a, b := f.GatewayAddrs[0], f.GatewayAddrs[1]

	// heldBy waits until job attempt runs on worker w, in its handler and
	// in the table.
	heldBy := func(t *testing.T, w *workerProcess, job string, attempt int) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, started := w.event(t, "start", job, attempt)
			assert.True(c, started, "handler not started")
			r, err := readJob(ctx, pool, job)
			require.NoError(c, err)
			assert.Equal(c, jobHeld{"RUNNING", w.ID, attempt}, jobHeld{r.Status, r.LockedBy, r.Attempts})
		}, recoveryTimeout, 20*time.Millisecond, "job %s attempt %d never ran on %s", job, attempt, w.ID)
	}

	t.Run("KillWorkerMidJob", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		const topic = "recovery.kill-worker"
		// The first worker's handler blocks until the process dies.
		victim := startWorker(t, f, workerSpec{ID: "kill-victim", Topic: topic, Gateways: []string{a, b},
			Hold: filepath.Join(t.TempDir(), "never")})
		sub, err := client.Enqueue(ctx, topic, map[string]any{"n": 1})
		require.NoError(t, err)
		heldBy(t, victim, sub.ID, 1)

		victim.killHard(t)
		rescuer := startWorker(t, f, workerSpec{ID: "kill-rescuer", Topic: topic, Gateways: []string{b, a}})

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			job, err := getJobHTTP(ctx, f, sub.ID)
			require.NoError(c, err)
			assert.Equal(c, "COMPLETED", job.Status, "job: %+v", job)
		}, recoveryTimeout, 50*time.Millisecond, "the killed worker's job was never completed")
		job, err := getJobHTTP(ctx, f, sub.ID)
		require.NoError(t, err)

		require.Equal(t, 2, job.Attempts, "one lost attempt, one successful")
		require.Len(t, job.Errors, 1, "the error history names the lost attempt once: %+v", job.Errors)
		require.Equal(t, attemptError{Attempt: 1, Error: leaseExpired, Worker: victim.ID}, job.Errors[0])
		_, ended := rescuer.event(t, "end", sub.ID, 2)
		require.True(t, ended, "attempt 2 ran on the rescuer")
		_, ended = victim.event(t, "end", sub.ID, 1)
		require.False(t, ended, "the victim died inside its handler")
		require.Equal(t, rescuer.ID, mustReadJob(t, ctx, pool, sub.ID).LockedBy, "the final state is the rescuer's")
	})

	t.Run("ZombieWorkerIsFencedOut", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		const topic = "recovery.zombie"
		dir := t.TempDir()
		zombieRelease, successorRelease := filepath.Join(dir, "zombie"), filepath.Join(dir, "successor")
		// Both handlers ignore their context and hold until released, so
		// the zombie really is still "working" when it wakes up.
		zombie := startWorker(t, f, workerSpec{ID: "zombie", Topic: topic, Gateways: []string{a, b}, Hold: zombieRelease})
		sub, err := client.Enqueue(ctx, topic, map[string]any{"n": 1})
		require.NoError(t, err)
		heldBy(t, zombie, sub.ID, 1)

		// Freeze the zombie past the TTL: its lease lapses, the reaper
		// retries the job and another worker claims it.
		require.NoError(t, zombie.Signal(syscall.SIGSTOP))
		successor := startWorker(t, f, workerSpec{ID: "zombie-successor", Topic: topic, Gateways: []string{b, a}, Hold: successorRelease})
		heldBy(t, successor, sub.ID, 2)

		// Wake the zombie. Its next heartbeat is answered "lease not held",
		// so the SDK cancels the handler's context with ErrLeaseLost, and
		// the row stays the successor's. (If the SIGSTOP caught a heartbeat
		// in flight, the SDK instead sees on waking that no renewal
		// succeeded for a TTL and gives the lease up without asking: same
		// cause, no further beat.)
		require.NoError(t, zombie.Signal(syscall.SIGCONT))
		require.Eventually(t, func() bool {
			_, ok := zombie.event(t, "canceled", sub.ID, 1)
			return ok
		}, recoveryTimeout, 20*time.Millisecond, "the zombie's handler was never told it lost the lease")
		canceled, _ := zombie.event(t, "canceled", sub.ID, 1)
		require.Equal(t, pulse.ErrLeaseLost.Error(), canceled.Cause, "the zombie's handler learned why")
		if _, answered := zombie.logged(logLeaseLost, sub.ID, 1); !answered {
			_, presumed := zombie.logged(logLeasePresumedLost, sub.ID, 1)
			require.True(t, presumed, "the zombie gave its lease up without either log line")
			t.Logf("the zombie gave its lease up on its own clock (a heartbeat was in flight at SIGSTOP)")
		}
		r := mustReadJob(t, ctx, pool, sub.ID)
		require.Equal(t, jobRow{Status: "RUNNING", Attempts: 2, LockedBy: successor.ID,
			Errors: []attemptError{{Attempt: 1, Error: leaseExpired, Worker: zombie.ID}}}, r,
			"the zombie's heartbeat took nothing back")

		// Let the zombie finish: it reports success for attempt 1, which is
		// refused and changes nothing.
		releaseHold(t, zombieRelease)
		var rejection map[string]any
		var ok bool
		require.Eventually(t, func() bool {
			rejection, ok = zombie.logged(logResultRejected, sub.ID, 1)
			return ok
		}, recoveryTimeout, 20*time.Millisecond, "the zombie's late report was never answered")
		require.Equal(t, "FailedPrecondition", rejection["code"], "late report: %v", rejection)
		zombieEnd, ok := zombie.event(t, "end", sub.ID, 1)
		require.True(t, ok)
		require.Empty(t, zombieEnd.Err, "the zombie reported success, the most harmful late report")
		require.Equal(t, r, mustReadJob(t, ctx, pool, sub.ID), "the zombie's late report changed the row")

		// The successor finishes the job: the final state is its own.
		releaseHold(t, successorRelease)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			r, err := readJob(ctx, pool, sub.ID)
			require.NoError(c, err)
			assert.Equal(c, "COMPLETED", r.Status, "job: %+v", r)
		}, recoveryTimeout, 20*time.Millisecond, "the successor never completed the job")
		r = mustReadJob(t, ctx, pool, sub.ID)
		require.Equal(t, jobRow{Status: "COMPLETED", Attempts: 2, LockedBy: successor.ID,
			Errors: []attemptError{{Attempt: 1, Error: leaseExpired, Worker: zombie.ID}}}, r)
		succStart, _ := successor.event(t, "start", sub.ID, 2)
		require.True(t, zombieEnd.At.After(succStart.At),
			"the two attempts overlapped, which is why delivery is at-least-once")
	})
}

// TestRecoveryFromGatewayKill kills -9 a dispatch-gateway while it holds
// jobs two ways: sent to a worker that is still running them, and claimed
// but never sent. Both kinds are recovered through lease expiry and
// finished by a worker on the other gateway; none is lost.
func TestRecoveryFromGatewayKill(t *testing.T) {
	t.Parallel()
	f := upChaosFleet(t, localfleet.Options{Gateways: 2, Reaper: true}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()
	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	defer client.Close()

	const topic = "recovery.kill-gateway"
	gatewayA := fleetProcess(t, f, localfleet.DispatchGateway+"-1")
	adminA, addrA, addrB := f.AdminURLs[gatewayA.Name], f.GatewayAddrs[0], f.GatewayAddrs[1]
	countOn := func(status, worker string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = $1 AND status = $2 AND locked_by = $3`,
			topic, status, worker).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	scrape := func(name, labelPart string) float64 {
		v, err := scrapeSum(ctx, adminA, name, labelPart)
		if err != nil {
			return -1
		}
		return v
	}
	submit := func(n int, args map[string]any) []string {
		reqs := make([]pulse.JobRequest, n)
		for i := range reqs {
			reqs[i] = pulse.JobRequest{Topic: topic, Args: args}
		}
		res, err := client.EnqueueMany(ctx, reqs)
		require.NoError(t, err)
		ids := make([]string, n)
		for i, r := range res {
			ids[i] = r.ID
		}
		return ids
	}

	// Sent and running: a worker connected to gateway A only, its handlers
	// blocked until their context is canceled.
	running := startWorker(t, f, workerSpec{ID: "on-gateway-a", Topic: topic, Gateways: []string{addrA}, Concurrency: 3,
		Hold: filepath.Join(t.TempDir(), "never"), HonorCancel: true})
	ids := submit(3, map[string]any{"kind": "running"})
	require.Eventually(t, func() bool { return countOn("RUNNING", running.ID) == 3 && len(running.events(t)) == 3 },
		recoveryTimeout, 20*time.Millisecond, "gateway A's worker never ran its 3 jobs")

	// Claimed but unsent, made deterministic with HTTP/2 flow control. A
	// raw stream ("blackhole") opens on gateway A with 4 slots and a fixed
	// 64 KiB receive window, and never reads. The first job carries 256 KiB
	// of args: the gateway's Send of it returns (gRPC queues a message while
	// the stream's write quota is positive) but only 64 KiB can go out, so
	// the quota stays negative and every later Send on that stream blocks.
	// The next 3 jobs are then claimed (RUNNING, leased to the blackhole)
	// and held in gateway A's memory, and the gateway's
	// pulse_assignments_sent_total proves they never went out.
	sentBefore := mustScrapeSum(t, ctx, adminA, "pulse_assignments_sent_total", "")
	openBlackhole(t, addrA, "blackhole", topic, 4)
	ids = append(ids, submit(1, map[string]any{"kind": "big", "pad": strings.Repeat("x", 256<<10)})...)
	require.Eventually(t, func() bool {
		return scrape("pulse_assignments_sent_total", "") == sentBefore+1
	}, recoveryTimeout, 10*time.Millisecond, "gateway A never sent the big job")
	ids = append(ids, submit(3, map[string]any{"kind": "unsent"})...)
	require.Eventually(t, func() bool {
		return scrape("pulse_jobs_dispatched_total", `topic="`+topic+`"`) >= 7
	}, recoveryTimeout, 10*time.Millisecond, "gateway A never claimed the blackhole's jobs")
	require.Equal(t, sentBefore+1, mustScrapeSum(t, ctx, adminA, "pulse_assignments_sent_total", ""),
		"gateway A sent the jobs it should be holding")

	require.NoError(t, gatewayA.Kill())
	require.Error(t, gatewayA.Wait(10*time.Second))
	forgetProcess(f, gatewayA)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- %s (killed) log tail ---\n%s", gatewayA.Name, lastLines(gatewayA.Logs(), 40))
		}
	})

	rescuer := startWorker(t, f, workerSpec{ID: "on-gateway-b", Topic: topic, Gateways: []string{addrB}, Concurrency: 8})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var done int
		require.NoError(c, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1::uuid[]) AND status = 'COMPLETED'`, ids).Scan(&done))
		assert.Equal(c, len(ids), done, "jobs completed")
	}, recoveryTimeout, 50*time.Millisecond, "jobs held by the killed gateway were lost")

	var total int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = $1`, topic).Scan(&total))
	require.Equal(t, len(ids), total)
	for _, id := range ids {
		r := mustReadJob(t, ctx, pool, id)
		require.Equal(t, rescuer.ID, r.LockedBy, "job %s: the final attempt is the rescuer's", id)
		require.Len(t, r.Errors, r.Attempts-1, "job %s: every attempt but the last lapsed: %+v", id, r)
		require.NotEmpty(t, r.Errors, "job %s was held by gateway A, so it lapsed once at least", id)
		for _, e := range r.Errors {
			require.Equal(t, leaseExpired, e.Error, "job %s", id)
			require.Contains(t, []string{running.ID, "blackhole"}, e.Worker, "job %s", id)
		}
		_, ok := rescuer.event(t, "end", id, r.Attempts)
		require.True(t, ok, "job %s: the rescuer ran the last attempt", id)
	}
	// The worker cut off with gateway A could not renew its leases, so the
	// SDK told each handler it had lost the lease.
	require.Eventually(t, func() bool {
		n := 0
		for _, e := range running.events(t) {
			if e.Event == "canceled" && e.Cause == pulse.ErrLeaseLost.Error() {
				n++
			}
		}
		return n == 3
	}, recoveryTimeout, 20*time.Millisecond, "the handlers on gateway A were not told their leases were lost")
}

// openBlackhole opens a StreamJobs stream that declares slots and never
// reads, with a fixed 64 KiB HTTP/2 window (see TestRecoveryFromGatewayKill).
func openBlackhole(t *testing.T, addr, workerID, topic string, slots int32) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := pulsev1.NewDispatchServiceClient(conn).StreamJobs(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Open{
		Open: &pulsev1.OpenStream{WorkerId: workerID, Topics: []string{topic}, Concurrency: slots},
	}}))
}
