package jobstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/schema"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// The read and CRUD side (ADR-0014): job listings and lookups, schedules,
// the pause audit log and the operator's cancel and retry run through bun,
// on models that name each column once. They share the store's pgx pool
// through pgx's database/sql adapter, so tracing (otelpgx) and the pool's
// metrics cover them as they cover the hot path. The hot path — claim,
// report, heartbeat, reap, insert, fire, pause, presence — stays hand-
// written pgx with its pinned plans.

// readDialect is the one bun dialect of the package: its table cache holds
// the models' schemas for every store.
var readDialect = pgdialect.New()

// reads returns the store's bun database, opening it on first use: a
// store that never reads (the reaper's, the scheduler's) opens nothing.
func (s *Store) reads() *bun.DB {
	s.readOnce.Do(func() {
		sqldb := stdlib.OpenDBFromPool(s.pool)
		s.readDB = bun.NewDB(sqldb, readDialect,
			bun.WithDiscardUnknownColumns(), // a newer schema's columns are not an error
			bun.WithConnResolver(simpleProtocol{sqldb}))
	})
	return s.readDB
}

// Close releases the read side's database/sql handle (not the pool, which
// belongs to the caller). Safe to call more than once, and on a store that
// never read.
func (s *Store) Close() error {
	s.readOnce.Do(func() {}) // a read after Close must not open a new handle
	if s.readDB == nil {
		return nil
	}
	return s.readDB.Close()
}

// simpleProtocol runs bun's statements with pgx's simple protocol. bun
// writes each argument into the statement text itself, so every page of a
// listing is a statement of its own: under the pool's default mode
// (prepare and cache per connection) each would cost a round trip to
// prepare and push a hot-path statement out of the connection's cache.
type simpleProtocol struct{ db *sql.DB }

func (c simpleProtocol) ResolveConn(context.Context, bun.Query) bun.IConn { return c }
func (c simpleProtocol) Close() error                                     { return nil }

func (c simpleProtocol) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return c.db.ExecContext(ctx, query, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
}

func (c simpleProtocol) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.db.QueryContext(ctx, query, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
}

func (c simpleProtocol) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return c.db.QueryRowContext(ctx, query, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
}

// jobRow is a row of jobs as the read side scans it.
type jobRow struct {
	bun.BaseModel `bun:"table:jobs,alias:j"`

	ID          uuid.UUID       `bun:"id,pk,type:uuid"`
	Topic       string          `bun:"topic"`
	Args        json.RawMessage `bun:"args,type:jsonb"`
	Priority    int16           `bun:"priority"`
	Status      string          `bun:"status"`
	Attempts    int32           `bun:"attempts"`
	Snoozes     int32           `bun:"snoozes"`
	MaxAttempts int32           `bun:"max_attempts"`
	Errors      json.RawMessage `bun:"errors,type:jsonb"`
	LockedBy    string          `bun:"locked_by,nullzero"`
	LeaseUntil  *time.Time      `bun:"lease_until"`
	NextRunAt   time.Time       `bun:"next_run_at"`
	SubmittedAt time.Time       `bun:"submitted_at"`
	StartedAt   *time.Time      `bun:"started_at"`
	FinishedAt  *time.Time      `bun:"finished_at"`
	ScheduleID  *uuid.UUID      `bun:"schedule_id,type:uuid"`
	// NULL reads as "" for the text columns a job may lack.
	IdempotencyKey string `bun:"idempotency_key,nullzero"`
	TraceParent    string `bun:"traceparent,nullzero"`
	TraceState     string `bun:"tracestate,nullzero"`
	// TimeoutMicros is jobs.timeout (an interval, NULL: none) in
	// microseconds, and the Retry* fields the job's retry policy, computed
	// by intervalMicrosSQL.
	TimeoutMicros    int64 `bun:"timeout_micros,scanonly"`
	RetryBaseMicros  int64 `bun:"retry_base_micros,scanonly"`
	RetryMaxMicros   int64 `bun:"retry_max_micros,scanonly"`
	RetryFixedMicros int64 `bun:"retry_fixed_micros,scanonly"`
	// Tags are the job's tags (migration 00006); NULL reads as nil.
	Tags []string `bun:"tags,array"`
	// ReplaceKey and Replaced: the job's replace key (NULL reads as "")
	// and how many submits replaced it while pending (ADR-0049).
	ReplaceKey string `bun:"replace_key,nullzero"`
	Replaced   int32  `bun:"replaced"`
	// Progress and Metadata are a running job's last report of itself
	// (migration 00004); NULL reads as -1 and nil.
	Progress *int16          `bun:"progress"`
	Metadata json.RawMessage `bun:"metadata,type:jsonb"`
	// Result is jobs.result (migration 00002), read only where one job is
	// read whole (Get, resultColumnSQL): a listing never carries results.
	Result []byte `bun:"result,scanonly"`
	// BlockedBy counts the job's unfinished parents and WorkflowID names
	// the graph it was submitted in (migration 00010; NULL: none).
	BlockedBy  int32      `bun:"blocked_by"`
	WorkflowID *uuid.UUID `bun:"workflow_id,type:uuid"`
}

// resultColumnSQL adds a job's result to a SELECT of selectJobs.
const resultColumnSQL = `j.result`

// intervalMicrosSQL reads the interval columns of a job (alias j) as
// microseconds (0: none).
const intervalMicrosSQL = `COALESCE((extract(epoch FROM j.timeout) * 1000000)::bigint, 0) AS timeout_micros,
       COALESCE((extract(epoch FROM j.retry_base) * 1000000)::bigint, 0) AS retry_base_micros,
       COALESCE((extract(epoch FROM j.retry_max) * 1000000)::bigint, 0) AS retry_max_micros,
       COALESCE((extract(epoch FROM j.retry_fixed) * 1000000)::bigint, 0) AS retry_fixed_micros`

func (r *jobRow) job() *Job {
	return &Job{
		ID: r.ID, Topic: r.Topic, Args: r.Args, Priority: r.Priority, Status: pulsetype.Status(r.Status),
		Attempts: r.Attempts, Snoozes: r.Snoozes, MaxAttempts: r.MaxAttempts, Errors: decodeErrors(r.Errors),
		LockedBy: r.LockedBy, LeaseUntil: r.LeaseUntil, NextRunAt: r.NextRunAt, SubmittedAt: r.SubmittedAt,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, ScheduleID: r.ScheduleID,
		IdempotencyKey: r.IdempotencyKey, TraceParent: r.TraceParent, TraceState: r.TraceState,
		Timeout: time.Duration(r.TimeoutMicros) * time.Microsecond,
		Result:  r.Result,
		Progress: func() int {
			if r.Progress == nil {
				return -1
			}
			return int(*r.Progress)
		}(),
		Metadata:   r.Metadata,
		Tags:       r.Tags,
		ReplaceKey: r.ReplaceKey,
		Replaced:   r.Replaced,
		BlockedBy:  r.BlockedBy,
		WorkflowID: r.WorkflowID,
		Retry: pulsetype.JobRetry{
			Base:  time.Duration(r.RetryBaseMicros) * time.Microsecond,
			Max:   time.Duration(r.RetryMaxMicros) * time.Microsecond,
			Fixed: time.Duration(r.RetryFixedMicros) * time.Microsecond,
		},
	}
}

func jobsOf(rows []jobRow) []*Job {
	if len(rows) == 0 {
		return nil
	}
	out := make([]*Job, len(rows))
	for i := range rows {
		out[i] = rows[i].job()
	}
	return out
}

// selectJobs is a SELECT of whole jobs into rows.
func (s *Store) selectJobs(rows any) *bun.SelectQuery {
	return s.reads().NewSelect().Model(rows).ColumnExpr("?TableColumns").ColumnExpr(intervalMicrosSQL)
}

// jobReturning is the RETURNING list of a statement that writes a job and
// answers with it (cancel, retry): jobRow's columns, as a SELECT of
// selectJobs reads them. Built from the model, so the columns are still
// named only there.
var jobReturning = func() string {
	table := readDialect.Tables().Get(reflect.TypeFor[jobRow]())
	cols := make([]string, 0, len(table.Fields)+1)
	for _, f := range table.Fields {
		cols = append(cols, string(f.SQLName))
	}
	return strings.Join(cols, ", ") + ", " + strings.ReplaceAll(intervalMicrosSQL, "FROM j.", "FROM ")
}()

// readError is interpretError for the read side: database/sql spells
// "no rows" its own way.
func readError(op string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		err = pgx.ErrNoRows
	}
	return interpretError(op, err)
}

// columnsOf lists a model's columns in field order, for the statements
// that stay on pgx but read a whole model row (the scheduler's fire).
func columnsOf(table *schema.Table) string {
	cols := make([]string, len(table.Fields))
	for i, f := range table.Fields {
		cols[i] = string(f.SQLName)
	}
	return strings.Join(cols, ", ")
}

// scanDests is, for a pgx scan of columnsOf(table), a pointer to each
// field of v (a pointer to the model) in the same order.
func scanDests(table *schema.Table, v any) []any {
	rv := reflect.ValueOf(v).Elem()
	dests := make([]any, len(table.Fields))
	for i, f := range table.Fields {
		dests[i] = rv.FieldByIndex(f.Index).Addr().Interface()
	}
	return dests
}
