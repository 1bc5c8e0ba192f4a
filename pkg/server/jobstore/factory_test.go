package jobstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// rowOpts describes a job row written directly, in any state, for tests.
type rowOpts struct {
	Status      jobstore.Status
	Topic       string
	Priority    int16
	Attempts    int32
	MaxAttempts int32
	LockedBy    string
	SubmittedAt time.Time
}

// insertRow writes a row straight into jobs, satisfying every CHECK for
// its status, so tests can start from any lifecycle state.
func insertRow(t *testing.T, pool *pgxpool.Pool, o rowOpts) uuid.UUID {
	t.Helper()
	if o.Status == "" {
		o.Status = jobstore.StatusPending
	}
	if o.Topic == "" {
		o.Topic = "test.topic"
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 3
	}
	if o.Priority == 0 {
		o.Priority = 5
	}
	if o.SubmittedAt.IsZero() {
		o.SubmittedAt = time.Now()
	}
	if o.Status == jobstore.StatusRunning && o.Attempts == 0 {
		o.Attempts = 1
	}
	if o.Status == jobstore.StatusRunning && o.LockedBy == "" {
		o.LockedBy = "worker-a"
	}
	id := uuid.Must(uuid.NewV7())
	var lease, started, finished *time.Time
	now := time.Now()
	if o.Status == jobstore.StatusRunning {
		l := now.Add(time.Minute)
		lease, started = &l, &now
	}
	if o.Status.Terminal() {
		finished = &now
	}
	var lockedBy *string
	if o.LockedBy != "" {
		lockedBy = &o.LockedBy
	}
	_, err := pool.Exec(context.Background(), `
		INSERT INTO jobs (id, topic, priority, status, attempts, max_attempts, locked_by,
		                  lease_until, started_at, finished_at, submitted_at, next_run_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)`,
		id, o.Topic, o.Priority, string(o.Status), o.Attempts, o.MaxAttempts, lockedBy,
		lease, started, finished, o.SubmittedAt)
	require.NoError(t, err)
	return id
}

func newJob(topic string, prio int16) jobstore.NewJob {
	return jobstore.NewJob{
		ID:          uuid.Must(uuid.NewV7()),
		Topic:       topic,
		Args:        []byte(`{}`),
		Priority:    prio,
		MaxAttempts: 3,
	}
}

func statusOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) jobstore.Status {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT status FROM jobs WHERE id = $1`, id).Scan(&s))
	return jobstore.Status(s)
}
