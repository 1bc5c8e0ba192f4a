// Package apitest builds control-api's service layer on a fresh test
// database, so the gRPC and HTTP transport tests drive the same real
// handlers, store and coalescer.
package apitest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit"
)

// Options shrink limits so tests can cross them cheaply.
type Options struct {
	MaxArgsBytes int // default jobspec.DefaultMaxArgsBytes
	MaxBatchJobs int // default 1000
}

// Bundle is one wired service on its own database.
type Bundle struct {
	Pool      *pgxpool.Pool
	Store     *jobstore.Store
	Coalescer *submit.Coalescer
	Service   *api.ControlService
}

// New wires a service on a fresh migrated database; the coalescer is
// drained and the pool closed when the test ends.
func New(t testing.TB, opts Options) *Bundle {
	t.Helper()
	if opts.MaxArgsBytes == 0 {
		opts.MaxArgsBytes = jobspec.DefaultMaxArgsBytes
	}
	if opts.MaxBatchJobs == 0 {
		opts.MaxBatchJobs = 1000
	}
	pool := pgtest.Pool(t)
	store := jobstore.New(pool)
	c := submit.NewCoalescer(store, submit.Options{MaxBatch: 1000, Flushers: 4})
	t.Cleanup(func() { require.NoError(t, c.Close(context.Background())) })
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
