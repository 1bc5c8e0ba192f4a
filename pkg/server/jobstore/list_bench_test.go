package jobstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// BenchmarkListJobs measures the read side's cost (ADR-0014): List through
// bun (the model, database/sql over the pgx pool, the simple protocol)
// against the hand-written pgx query it replaced (listPgx, kept here as
// the baseline), on one connection of a real database, for a page of 1,
// 50 and 500 jobs out of 2,000.
//
//	go test -run '^$' -bench BenchmarkListJobs -benchmem ./pkg/server/jobstore/
func BenchmarkListJobs(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.Pool(b)
	s := New(pool)
	defer s.Close()
	jobs := make([]pulsetype.NewJob, 2000)
	for i := range jobs {
		jobs[i] = pulsetype.NewJob{ID: uuid.Must(uuid.NewV7()), Topic: "bench.list", Args: []byte(`{"to":"someone@example.com","n":42}`),
			Priority: 5, MaxAttempts: 3, IdempotencyKey: fmt.Sprintf("key-%d", i), Timeout: time.Minute}
	}
	if _, err := s.Insert(ctx, jobs); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		b.Fatal(err)
	}
	for _, limit := range []int{1, 50, 500} {
		for _, impl := range []struct {
			name string
			list func(context.Context, ListFilter) ([]*Job, error)
		}{{"pgx", s.listPgx}, {"bun", s.List}} {
			b.Run(fmt.Sprintf("page=%d/%s", limit, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				f := ListFilter{Topic: "bench.list", Status: pulsetype.StatusPending, Limit: limit}
				for b.Loop() {
					got, err := impl.list(ctx, f)
					if err != nil {
						b.Fatal(err)
					}
					if len(got) != limit {
						b.Fatalf("got %d jobs, want %d", len(got), limit)
					}
				}
			})
		}
	}
}

// TestListPgxBaselineMatchesList keeps the benchmark's baseline honest:
// the hand-written query answers what List answers.
func TestListPgxBaselineMatchesList(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s := New(pool)
	defer s.Close()
	jobs := []pulsetype.NewJob{
		{ID: uuid.Must(uuid.NewV7()), Topic: "same", Args: []byte(`{"a":1}`), Priority: 5, MaxAttempts: 3, Timeout: 2 * time.Second},
		{ID: uuid.Must(uuid.NewV7()), Topic: "same", Args: []byte(`{}`), Priority: 1, MaxAttempts: 1, IdempotencyKey: "k", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}
	if _, err := s.Insert(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	f := ListFilter{Topic: "same", Limit: 10}
	want, err := s.listPgx(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.List(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(want) != 2 {
		t.Fatalf("got %d, want %d", len(got), len(want))
	}
	for i := range got {
		if g, w := fmt.Sprintf("%+v", *got[i]), fmt.Sprintf("%+v", *want[i]); g != w {
			t.Errorf("job %d:\n bun %s\n pgx %s", i, g, w)
		}
	}
}

// listPgx is List as it was written before the read side moved to bun:
// a hand-kept column list, positional scan, pgx's cached prepared
// statements. The benchmark's baseline only.
func (s *Store) listPgx(ctx context.Context, f ListFilter) ([]*Job, error) {
	const cols = `id, topic, args, priority, status, attempts, max_attempts, errors,
	COALESCE(locked_by, ''), lease_until, next_run_at, submitted_at, started_at, finished_at,
	schedule_id, COALESCE(idempotency_key, ''), COALESCE(traceparent, ''), COALESCE(tracestate, ''),
	COALESCE((extract(epoch FROM timeout) * 1000000)::bigint, 0), COALESCE(progress, -1), metadata`
	var where []string
	var args []any
	if f.Topic != "" {
		args = append(args, f.Topic)
		where = append(where, fmt.Sprintf("topic = $%d", len(args)))
	}
	if f.Status != "" {
		args = append(args, string(f.Status))
		where = append(where, fmt.Sprintf("status = $%d", len(args)))
	}
	if f.Before != nil {
		args = append(args, *f.Before)
		where = append(where, fmt.Sprintf("id < $%d", len(args)))
	}
	q := `SELECT ` + cols + ` FROM jobs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, f.Limit)
	q += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Job
	for rows.Next() {
		var j Job
		var status string
		var errs []byte
		var timeoutMicros int64
		var progress int16
		if err := rows.Scan(&j.ID, &j.Topic, &j.Args, &j.Priority, &status, &j.Attempts, &j.MaxAttempts, &errs,
			&j.LockedBy, &j.LeaseUntil, &j.NextRunAt, &j.SubmittedAt, &j.StartedAt, &j.FinishedAt,
			&j.ScheduleID, &j.IdempotencyKey, &j.TraceParent, &j.TraceState, &timeoutMicros, &progress, &j.Metadata); err != nil {
			return nil, err
		}
		j.Status, j.Errors = pulsetype.Status(status), decodeErrors(errs)
		j.Timeout = time.Duration(timeoutMicros) * time.Microsecond
		j.Progress = int(progress)
		out = append(out, &j)
	}
	return out, rows.Err()
}
