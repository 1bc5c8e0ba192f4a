package jobstore_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// rowOpts describes a job row for tests, in any lifecycle state.
type rowOpts struct {
	Status      pulsetype.Status
	Topic       string
	Priority    int16 // 0: 5
	Attempts    int32 // claims made; see jobstoretest.Spec
	MaxAttempts int32
	LockedBy    string
	SubmittedAt time.Time
}

// insertRow builds a job in o's state the way the schema allows (migration
// 00005): born PENDING, then claimed, failed, completed or canceled by
// legal transitions (jobstoretest), so tests can start from any lifecycle
// state. next_run_at is submitted_at, so PENDING and RETRYING rows are
// claimable.
func insertRow(t *testing.T, pool *pgxpool.Pool, o rowOpts) uuid.UUID {
	t.Helper()
	if o.Priority == 0 {
		o.Priority = 5
	}
	return jobstoretest.MustCreate(t, pool, jobstoretest.Spec{
		Status:      o.Status,
		Topic:       o.Topic,
		Priority:    o.Priority,
		Attempts:    o.Attempts,
		MaxAttempts: o.MaxAttempts,
		Worker:      o.LockedBy,
		SubmittedAt: o.SubmittedAt,
	})
}

func newJob(topic string, prio int16) pulsetype.NewJob {
	return pulsetype.NewJob{
		ID:          uuid.Must(uuid.NewV7()),
		Topic:       topic,
		Args:        []byte(`{}`),
		Priority:    prio,
		MaxAttempts: 3,
	}
}

func statusOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) pulsetype.Status {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT status FROM jobs WHERE id = $1`, id).Scan(&s))
	return pulsetype.Status(s)
}

// setRetryPolicy sets the retry_policy row of the test's database: failed
// attempt n waits min(n² × unit, maxDelay).
func setRetryPolicy(t testing.TB, store *jobstore.Store, unit, maxDelay time.Duration) {
	t.Helper()
	_, _, err := store.SetRetryPolicy(t.Context(), &unit, &maxDelay, "test")
	require.NoError(t, err)
}

// newStore is jobstore.New, closed when the test ends (the read side's
// database/sql handle would otherwise outlive it).
func newStore(t testing.TB, pool *pgxpool.Pool, opts ...jobstore.Option) *jobstore.Store {
	t.Helper()
	s := jobstore.New(pool, opts...)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// newPool is a pool on a fresh database of its own.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.Pool(t)
}
