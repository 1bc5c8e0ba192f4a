package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

var (
	alice = authtest.Basic("alice", "alice-pw")
	bob   = authtest.Basic("bob", "bob-pw")
	ops   = authtest.Bearer("ops-token")
	prod  = authtest.Basic("prod", "prod-pw")
)

func fleetAuth(t *testing.T) *auth.Authenticator {
	t.Helper()
	a, err := auth.New("alice:worker:alice-pw,bob:worker:bob-pw,prod:producer:prod-pw", "ops:operator:ops-token")
	require.NoError(t, err)
	return a
}

// openStream opens a stream as authorization and returns it with its first
// message, or the error that refused it.
func openStream(t *testing.T, g *gateway, authorization, worker string, topics []string, concurrency int32) (pulsev1.DispatchService_StreamJobsClient, context.CancelFunc, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	if authorization != "" {
		ctx = as(ctx, authorization)
	}
	stream, err := g.client.StreamJobs(ctx)
	require.NoError(t, err)
	if err := stream.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Open{Open: &pulsev1.OpenStream{
		WorkerId: worker, Topics: topics, Concurrency: concurrency}}}); err != nil && !errors.Is(err, io.EOF) {
		require.NoError(t, err)
	}
	msg, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, nil, err
	}
	require.NotNil(t, msg.GetWelcome())
	return stream, cancel, nil
}

type jobRow struct {
	Status     string
	Attempts   int32
	LockedBy   string
	LeaseUntil time.Time
	Errors     string
}

func readJob(t *testing.T, pool *pgxpool.Pool, id string) jobRow {
	t.Helper()
	var r jobRow
	var lockedBy *string
	var lease *time.Time
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT status, attempts, locked_by, lease_until, errors::text FROM jobs WHERE id = $1`, id).
		Scan(&r.Status, &r.Attempts, &lockedBy, &lease, &r.Errors))
	if lockedBy != nil {
		r.LockedBy = *lockedBy
	}
	if lease != nil {
		r.LeaseUntil = *lease
	}
	return r
}

// TestAWorkerActsOnlyAsItself: worker credential B, knowing the job id,
// attempt and locked_by of worker A's jobs (all of which a producer can
// read), cannot extend, complete, fail or dead-letter them, over the
// gateway that leased them or another replica; A can, over either.
func TestAWorkerActsOnlyAsItself(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	authn := fleetAuth(t)
	gw1 := startGateway(t, pool, gatewayOpts{id: "gw-1", authn: authn})
	gw2 := startGateway(t, pool, gatewayOpts{id: "gw-2", authn: authn})
	insert(t, gw1.store, 3)

	stream, cancel, err := openStream(t, gw1, alice, "w1", []string{"t"}, 3)
	require.NoError(t, err)
	defer cancel()
	jobs := recvJobs(t, stream, 3)
	for _, a := range jobs {
		row := readJob(t, pool, a.GetJobId())
		require.Equal(t, "RUNNING", row.Status)
		require.Equal(t, "alice/w1", row.LockedBy, "the lease is held as the identity plus the worker id")
	}
	before := map[string]jobRow{}
	for _, a := range jobs {
		before[a.GetJobId()] = readJob(t, pool, a.GetJobId())
	}
	refs := func(as ...*pulsev1.Assignment) []*pulsev1.JobRef {
		var out []*pulsev1.JobRef
		for _, a := range as {
			out = append(out, &pulsev1.JobRef{JobId: a.GetJobId(), Attempt: a.GetAttempt()})
		}
		return out
	}
	results := func(outcomes ...pulsev1.Outcome) []*pulsev1.JobResult {
		var out []*pulsev1.JobResult
		for i, o := range outcomes {
			out = append(out, &pulsev1.JobResult{JobId: jobs[i].GetJobId(), Attempt: jobs[i].GetAttempt(), Outcome: o, Error: "not mine"})
		}
		return out
	}
	all := results(pulsev1.Outcome_OUTCOME_COMPLETE, pulsev1.Outcome_OUTCOME_FAIL, pulsev1.Outcome_OUTCOME_FAIL_PERMANENT)

	// Bob, a worker too, tries every spelling of alice's worker on both
	// replicas: her worker id, and her jobs' locked_by itself.
	for name, g := range map[string]*gateway{"SameGateway": gw1, "OtherReplica": gw2} {
		for _, worker := range []string{"w1", "alice/w1", "bob/../alice/w1"} {
			hb, err := g.client.Heartbeat(as(t.Context(), bob), &pulsev1.HeartbeatRequest{WorkerId: worker, Jobs: refs(jobs...)})
			require.NoError(t, err, name)
			for _, r := range hb.GetResults() {
				require.False(t, r.GetLeaseHeld(), "%s: bob as %q extended alice's lease", name, worker)
			}
			resp, err := g.client.ReportResult(as(t.Context(), bob), &pulsev1.ReportResultRequest{WorkerId: worker, Results: all})
			require.NoError(t, err, name)
			for i, ack := range resp.GetAcks() {
				require.EqualValues(t, codes.FailedPrecondition, ack.GetCode(), "%s: bob as %q settled job %d", name, worker, i)
				require.Contains(t, ack.GetMessage(), "leased to another worker")
			}
		}
		// Operators and producers cannot act as workers at all.
		for _, who := range []string{ops, prod} {
			_, err := g.client.Heartbeat(as(t.Context(), who), &pulsev1.HeartbeatRequest{WorkerId: "w1", Jobs: refs(jobs...)})
			require.Equal(t, codes.PermissionDenied, status.Code(err), err)
			_, err = g.client.ReportResult(as(t.Context(), who), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: all})
			require.Equal(t, codes.PermissionDenied, status.Code(err), err)
		}
	}
	for _, a := range jobs {
		require.Equal(t, before[a.GetJobId()], readJob(t, pool, a.GetJobId()), "nothing of alice's job changed: not the lease, not the status, not the errors")
	}

	// Bob cannot take alice's worker id either, on either replica, while
	// her stream is open; another worker id of his own is fine.
	for _, g := range []*gateway{gw1, gw2} {
		_, _, err := openStream(t, g, bob, "w1", []string{"t"}, 1)
		require.Equal(t, codes.AlreadyExists, status.Code(err), err)
		require.Contains(t, status.Convert(err).Message(), `"w1"`)
		require.NotContains(t, status.Convert(err).Message(), "alice", "the refusal does not name the other identity")
	}
	_, cancelBob, err := openStream(t, gw2, bob, "w2", []string{"t"}, 1)
	require.NoError(t, err)
	cancelBob()

	// Alice can, over the other replica: extend, complete, fail, dead-letter.
	hb, err := gw2.client.Heartbeat(as(t.Context(), alice), &pulsev1.HeartbeatRequest{WorkerId: "w1", Jobs: refs(jobs...)})
	require.NoError(t, err)
	for _, r := range hb.GetResults() {
		require.True(t, r.GetLeaseHeld())
	}
	require.True(t, readJob(t, pool, jobs[0].GetJobId()).LeaseUntil.After(before[jobs[0].GetJobId()].LeaseUntil), "her heartbeat extended the lease")
	resp, err := gw2.client.ReportResult(as(t.Context(), alice), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: all})
	require.NoError(t, err)
	want := []pulsev1.JobStatus{pulsev1.JobStatus_JOB_STATUS_COMPLETED, pulsev1.JobStatus_JOB_STATUS_RETRYING, pulsev1.JobStatus_JOB_STATUS_DEAD_LETTERED}
	for i, ack := range resp.GetAcks() {
		require.EqualValues(t, codes.OK, ack.GetCode(), ack.GetMessage())
		require.Equal(t, want[i], ack.GetStatus())
	}
	require.Contains(t, readJob(t, pool, jobs[1].GetJobId()).Errors, `"worker": "alice/w1"`, "the error history names the lease holder")
}

// TestLeasesStayWorkerIDsWithAuthOff: in open mode nothing changes:
// locked_by is the worker id, and any caller may report for it.
func TestLeasesStayWorkerIDsWithAuthOff(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	gw := startGateway(t, pool, gatewayOpts{id: "gw-open"})
	insert(t, gw.store, 1)
	stream, cancel, err := openStream(t, gw, "", "w1", []string{"t"}, 1)
	require.NoError(t, err)
	defer cancel()
	a := recvJobs(t, stream, 1)[0]
	require.Equal(t, "w1", readJob(t, pool, a.GetJobId()).LockedBy)
	resp, err := gw.client.ReportResult(t.Context(), &pulsev1.ReportResultRequest{WorkerId: "w1", Results: []*pulsev1.JobResult{
		{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Outcome: pulsev1.Outcome_OUTCOME_COMPLETE}}})
	require.NoError(t, err)
	require.EqualValues(t, codes.OK, resp.GetAcks()[0].GetCode())
}

// TestPresence: a stream's topics are present in the database while it is
// open, on every replica's view, and vanish when it closes; a gateway keeps
// its rows fresh and sweeps rows whose gateway died; a stream whose worker
// id another identity took over ends.
func TestPresence(t *testing.T) {
	t.Parallel()

	served := func(t *testing.T, g *gateway, topic string) bool {
		t.Helper()
		ok, _, err := g.store.TopicPresence(t.Context(), topic)
		require.NoError(t, err)
		return ok
	}

	t.Run("AStreamsTopicsArePresentUntilItCloses", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		gw := startGateway(t, pool, gatewayOpts{id: "gw-1", authn: fleetAuth(t), presenceInterval: 30 * time.Millisecond, presenceTTL: 300 * time.Millisecond})
		require.False(t, served(t, gw, "mail"))
		_, cancel, err := openStream(t, gw, alice, "w1", []string{"mail", "sms"}, 1)
		require.NoError(t, err)
		require.True(t, served(t, gw, "mail"), "present as soon as the stream is welcomed")
		require.True(t, served(t, gw, "sms"))
		var principal, gateway string
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT principal, gateway FROM worker_presence WHERE worker_id = 'w1'`).Scan(&principal, &gateway))
		require.Equal(t, "alice", principal)
		require.Equal(t, "gw-1", gateway)

		// The refresh keeps the row alive: its expiry moves on past two
		// whole TTLs beyond the first one, and the topic stays served.
		var first time.Time
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT expires_at FROM worker_presence WHERE worker_id = 'w1'`).Scan(&first))
		proctest.WaitFor(t, "the presence row to be refreshed past two TTLs", func() bool {
			var now time.Time
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT expires_at FROM worker_presence WHERE worker_id = 'w1'`).Scan(&now))
			return now.After(first.Add(2 * 300 * time.Millisecond))
		})
		require.True(t, served(t, gw, "mail"), "refreshed, not expired")

		cancel()
		require.Eventually(t, func() bool { return !served(t, gw, "mail") }, 5*time.Second, 10*time.Millisecond, "gone after close")
		var rows int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_presence`).Scan(&rows))
		require.Zero(t, rows)
		_, seen, err := gw.store.TopicPresence(t.Context(), "mail")
		require.NoError(t, err)
		require.NotNil(t, seen, "the topic remembers when its worker left")
	})

	t.Run("AStoppedGatewayLeavesNoRows", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		gw := startGateway(t, pool, gatewayOpts{id: "gw-1"})
		_, _, err := openStream(t, gw, "", "w1", []string{"t"}, 1)
		require.NoError(t, err)
		require.True(t, served(t, gw, "t"))
		gw.stop() // ends the streams, then deletes their rows
		var rows int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_presence`).Scan(&rows))
		require.Zero(t, rows)
	})

	t.Run("ExpiredRowsOfADeadGatewayAreSwept", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		_, err := pool.Exec(t.Context(), `INSERT INTO worker_presence (worker_id, principal, gateway, topics, last_seen, expires_at)
			VALUES ('ghost', 'anonymous', 'gw-dead', '{old}', now() - interval '1 hour', now() - interval '59 minutes')`)
		require.NoError(t, err)
		gw := startGateway(t, pool, gatewayOpts{id: "gw-1", presenceInterval: 20 * time.Millisecond, presenceTTL: time.Second})
		require.False(t, served(t, gw, "old"), "an expired row serves nothing")
		require.Eventually(t, func() bool {
			var rows int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_presence`).Scan(&rows))
			return rows == 0
		}, 5*time.Second, 10*time.Millisecond)
	})

	t.Run("AStreamWhoseWorkerIDWasTakenOverEnds", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		gw := startGateway(t, pool, gatewayOpts{id: "gw-1", authn: fleetAuth(t), presenceInterval: 20 * time.Millisecond, presenceTTL: time.Second})
		stream, cancel, err := openStream(t, gw, alice, "w1", []string{"t"}, 1)
		require.NoError(t, err)
		defer cancel()
		// As if alice's row had expired and bob had opened w1 elsewhere.
		_, err = pool.Exec(t.Context(), `UPDATE worker_presence SET principal = 'bob', connected_at = clock_timestamp() WHERE worker_id = 'w1'`)
		require.NoError(t, err)
		for {
			_, err = stream.Recv()
			if err != nil {
				break
			}
		}
		require.Equal(t, codes.AlreadyExists, status.Code(err), err)
	})
}

// TestIdleWorkersCostTheDatabaseLittle: a gateway holding 1,000 idle
// streams issues fewer than 5 round trips a second in total (claim poll,
// pause refresh, presence), whatever the number of streams. Presence runs
// here ten times as often as by default.
func TestIdleWorkersCostTheDatabaseLittle(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("opens 1,000 streams; make test-long runs it")
	}
	counter := &roundTrips{}
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	gw := startGateway(t, pool, gatewayOpts{id: "gw-1", pollInterval: 500 * time.Millisecond, presenceInterval: time.Second, withPause: true})

	const workers = 1000
	for i := range workers {
		_, _, err := openStream(t, gw, "", fmt.Sprintf("idle-%d", i), []string{"idle.topic"}, 4)
		require.NoError(t, err)
	}
	// The opens have settled once every stream is present.
	proctest.WaitFor(t, "every stream to be present", func() bool {
		var live int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_presence WHERE expires_at > now()`).Scan(&live))
		return live == workers
	})
	const window = 5 * time.Second
	start := counter.n.Load()
	time.Sleep(window)
	n := counter.n.Load() - start
	var live int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_presence WHERE expires_at > now()`).Scan(&live))
	require.Equal(t, workers, live, "every stream present")
	rate := float64(n) / window.Seconds()
	t.Logf("%d idle streams: %d round trips in %s (%.1f/s)", workers, n, window, rate)
	require.Less(t, rate, 5.0)
}

// roundTrips counts what a pool sends: each query and each batch (one
// pipelined round trip, one implicit transaction) once.
type roundTrips struct{ n atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
