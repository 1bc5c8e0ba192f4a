// Package pulsetxtest asserts on the jobs an application enqueued with
// package pulsetx, by reading the jobs table in the application's own
// transaction: a job enqueued in a transaction that has not committed is
// visible to that transaction only, so the assertion runs in it.
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	placeOrder(ctx, tx, order) // the code under test calls pulsetx.Enqueue
//	job := pulsetxtest.RequireEnqueued(ctx, t, tx, "order.confirm", Order{ID: 42})
//
// Args are compared as Postgres compares jsonb values: key order,
// spacing and the spelling of numbers do not matter.
package pulsetxtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// Job is one row of the jobs table, as a test sees it.
type Job struct {
	ID             string
	Topic          string
	Args           json.RawMessage
	Status         pulsetype.Status
	Priority       int
	MaxAttempts    int
	RunAt          time.Time // next_run_at: when it may start
	IdempotencyKey string
	Timeout        time.Duration
}

// Querier is what the assertions read through: a pgx.Tx, or a *pgx.Conn
// or *pgxpool.Pool to see committed jobs.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

const jobsSQL = `
SELECT id::text, topic, args::text, status, priority, max_attempts, next_run_at,
       COALESCE(idempotency_key, ''),
       COALESCE((extract(epoch FROM timeout) * 1000000)::bigint, 0)
FROM jobs
WHERE topic = $1 AND ($2::jsonb IS NULL OR args = $2::jsonb)
ORDER BY submitted_at, id`

// RequireEnqueued fails the test unless a job of topic whose args equal
// args (as jsonb values; nil: any args) is visible to q, and returns the
// first such job. args are encoded as pulse.Client.Enqueue encodes them.
func RequireEnqueued(ctx context.Context, t testing.TB, q Querier, topic string, args any) Job {
	t.Helper()
	want, err := encode(args)
	if err != nil {
		t.Fatalf("pulsetxtest: RequireEnqueued(%q): %v", topic, err)
	}
	jobs, err := read(ctx, pgxRows{q}, topic, want)
	if err != nil {
		t.Fatalf("pulsetxtest: %v", err)
	}
	if len(jobs) == 0 {
		all, err := read(ctx, pgxRows{q}, topic, nil)
		if err != nil {
			t.Fatalf("pulsetxtest: %v", err)
		}
		t.Fatalf("pulsetxtest: no job of topic %q with args %s; jobs of the topic: %s", topic, orAny(want), describe(all))
	}
	return jobs[0]
}

// RequireNotEnqueued fails the test if a job of topic is visible to q.
func RequireNotEnqueued(ctx context.Context, t testing.TB, q Querier, topic string) {
	t.Helper()
	jobs, err := read(ctx, pgxRows{q}, topic, nil)
	if err != nil {
		t.Fatalf("pulsetxtest: %v", err)
	}
	if len(jobs) > 0 {
		t.Fatalf("pulsetxtest: want no job of topic %q, got %s", topic, describe(jobs))
	}
}

// Enqueued is every job of topic visible to q, oldest first.
func Enqueued(ctx context.Context, t testing.TB, q Querier, topic string) []Job {
	t.Helper()
	jobs, err := read(ctx, pgxRows{q}, topic, nil)
	if err != nil {
		t.Fatalf("pulsetxtest: %v", err)
	}
	return jobs
}

// RequireEnqueuedSQL is RequireEnqueued for a database/sql transaction
// (pulsetx.EnqueueSQL).
func RequireEnqueuedSQL(ctx context.Context, t testing.TB, tx *sql.Tx, topic string, args any) Job {
	t.Helper()
	want, err := encode(args)
	if err != nil {
		t.Fatalf("pulsetxtest: RequireEnqueuedSQL(%q): %v", topic, err)
	}
	jobs, err := read(ctx, sqlRows{tx}, topic, want)
	if err != nil {
		t.Fatalf("pulsetxtest: %v", err)
	}
	if len(jobs) == 0 {
		all, _ := read(ctx, sqlRows{tx}, topic, nil)
		t.Fatalf("pulsetxtest: no job of topic %q with args %s; jobs of the topic: %s", topic, orAny(want), describe(all))
	}
	return jobs[0]
}

// encode is args as the SDK sends them; nil stays nil (any args).
func encode(args any) (*string, error) {
	if args == nil {
		return nil, nil
	}
	spec, err := (&pulse.JobRequest{Topic: "pulsetxtest", Args: args}).Spec()
	if err != nil {
		return nil, err
	}
	s := string(spec.GetArgs())
	return &s, nil
}

// rows is one row source, so pgx and database/sql share read.
type rows interface {
	each(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error
}

type pgxRows struct{ q Querier }

func (r pgxRows) each(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rs, err := r.q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		if err := row(rs.Scan); err != nil {
			return err
		}
	}
	return rs.Err()
}

type sqlRows struct{ tx *sql.Tx }

func (r sqlRows) each(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rs, err := r.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		if err := row(rs.Scan); err != nil {
			return err
		}
	}
	return rs.Err()
}

func read(ctx context.Context, src rows, topic string, args *string) ([]Job, error) {
	var jobs []Job
	err := src.each(ctx, jobsSQL, []any{topic, args}, func(scan func(dest ...any) error) error {
		var (
			j      Job
			a      string
			status string
			micros int64
		)
		if err := scan(&j.ID, &j.Topic, &a, &status, &j.Priority, &j.MaxAttempts, &j.RunAt, &j.IdempotencyKey, &micros); err != nil {
			return err
		}
		j.Args, j.Status, j.Timeout = json.RawMessage(a), pulsetype.Status(status), time.Duration(micros)*time.Microsecond
		jobs = append(jobs, j)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read jobs of topic %q: %w", topic, err)
	}
	return jobs, nil
}

func orAny(args *string) string {
	if args == nil {
		return "(any)"
	}
	return *args
}

func describe(jobs []Job) string {
	if len(jobs) == 0 {
		return "none"
	}
	parts := make([]string, len(jobs))
	for i, j := range jobs {
		parts[i] = fmt.Sprintf("%s %s %s", j.ID, j.Status, j.Args)
	}
	return strings.Join(parts, "; ")
}
