// Package apitest builds control-api's service layer on a fresh test
// database, so the gRPC and HTTP transport tests drive the same real
// handlers, store and coalescer.
package apitest

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit"
)

// Options shrink limits so tests can cross them cheaply.
type Options struct {
	MaxArgsBytes int // default pulsetype.DefaultMaxArgsBytes
	MaxBatchJobs int // default 1000
	Flushers     int // the coalescer's; default 4
	// Inserter, when set, wraps the store the coalescer inserts through
	// (a gate that lines submits up into one batch).
	Inserter func(submit.Inserter) submit.Inserter
}

// Bundle is one wired service on its own database.
type Bundle struct {
	Pool      *pgxpool.Pool
	Store     *jobstore.Store
	Coalescer *submit.Coalescer
	Service   *api.ControlService
}

// New wires a service on a fresh migrated database; the coalescer is
// closed (every accepted submit inserted) and the pool closed when the
// test ends.
func New(t testing.TB, opts Options) *Bundle {
	t.Helper()
	if opts.MaxArgsBytes == 0 {
		opts.MaxArgsBytes = pulsetype.DefaultMaxArgsBytes
	}
	if opts.MaxBatchJobs == 0 {
		opts.MaxBatchJobs = 1000
	}
	pool := pgtest.Pool(t)
	store := jobstore.New(pool)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	if opts.Flushers == 0 {
		opts.Flushers = 4
	}
	var ins submit.Inserter = store
	if opts.Inserter != nil {
		ins = opts.Inserter(store)
	}
	c := submit.NewCoalescer(ins, submit.Options{MaxBatch: 1000, Flushers: opts.Flushers})
	t.Cleanup(func() { require.NoError(t, c.Close(context.Background())) })
	if g, ok := ins.(interface{ Open() }); ok {
		t.Cleanup(g.Open) // runs first: a shut gate would hold Close forever
	}
	svc := api.NewControlService(store, c, api.Options{
		Limits:       jobspec.Limits{MaxArgsBytes: opts.MaxArgsBytes},
		MaxBatchJobs: opts.MaxBatchJobs,
	})
	return &Bundle{Pool: pool, Store: store, Coalescer: c, Service: svc}
}

// CountJobs is the number of rows in jobs: tests of bad input check it is
// unchanged, proving nothing was half-written.
func (b *Bundle) CountJobs(t testing.TB) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs`).Scan(&n))
	return n
}

// Rows counts what control-api writes: jobs, schedules, pause state and
// the pause audit log. A refused request leaves it unchanged.
type Rows struct{ Jobs, Schedules, DispatchControl, ControlEvents int }

// CountRows reads Rows.
func (b *Bundle) CountRows(t testing.TB) Rows {
	t.Helper()
	var r Rows
	require.NoError(t, b.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM jobs), (SELECT count(*) FROM schedules),
		(SELECT count(*) FROM dispatch_control), (SELECT count(*) FROM control_events)`).
		Scan(&r.Jobs, &r.Schedules, &r.DispatchControl, &r.ControlEvents))
	return r
}

// PoisonArgs makes this test's database refuse, with a CHECK violation
// named jobs_args_object, args holding a "poison" key: a data error no
// validation knows about, so a poisoned submit joins its batch and
// Postgres refuses the batch. Since migration 00013 jobs_args_object is a
// rule of the jobs_guard_spec trigger, not a constraint, so this adds a
// CHECK of that name: the refusal reads like the schema's own, and
// interpretError maps it to the args field.
func (b *Bundle) PoisonArgs(t testing.TB) {
	t.Helper()
	_, err := b.Pool.Exec(context.Background(), `ALTER TABLE jobs
		ADD CONSTRAINT jobs_args_object CHECK (NOT args ? 'poison')`)
	require.NoError(t, err)
}

// Dial serves srv on a loopback port and returns a client connection to
// it; both close, and the server stops, when the test ends.
func Dial(tb testing.TB, srv *grpcserver.Server) *grpc.ClientConn {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	var served sync.WaitGroup
	served.Go(func() { _ = srv.Serve(lis) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_ = conn.Close()
		require.NoError(tb, srv.Stop(context.Background()))
		served.Wait()
	})
	return conn
}
