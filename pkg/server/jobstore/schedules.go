package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// SchedulesChannel is the NOTIFY channel the schedules trigger sends on
// after every insert, update or delete; schedulers wake on it.
const SchedulesChannel = "pulse_schedules_changed"

// Schedule is one row of schedules, and the read side's model of it
// (ADR-0014): its tags name each column once, for bun and for the
// scheduler's fire statement alike. Kind, Expression and TimeZone are
// validated by package schedule before they reach the store.
type Schedule struct {
	ID          uuid.UUID `bun:"id,pk,type:uuid"`
	Name        string    `bun:"name"`
	Topic       string    `bun:"topic"`
	Args        []byte    `bun:"args"` // a JSON object; written as text cast to jsonb (argsValue)
	Priority    int16     `bun:"priority"`
	MaxAttempts int32     `bun:"max_attempts"`
	Kind        string    `bun:"kind"`
	Expression  string    `bun:"expression"`
	TimeZone    string    `bun:"time_zone"`
	Enabled     bool      `bun:"enabled"`
	// NextRunAt is the cursor: the next occurrence to fire; nil once an at
	// schedule has fired.
	NextRunAt   *time.Time `bun:"next_run_at"`
	LastFiredAt *time.Time `bun:"last_fired_at"`
	CreatedAt   time.Time  `bun:"created_at"`
	UpdatedAt   time.Time  `bun:"updated_at"`
}

// scheduleTable is Schedule's schema as bun reads it; the fire statement
// (pgx, the hot path) selects and scans its columns from it.
var scheduleTable = readDialect.Tables().Get(reflect.TypeFor[Schedule]())

// scheduleColumns is every column of Schedule, in field order.
var scheduleColumns = columnsOf(scheduleTable)

// argsValue writes Schedule.Args: bun would send a []byte as bytea.
const argsValue = "?::jsonb"

// settableScheduleColumns are the columns Create and Update write; the
// others are the schema's (created_at, updated_at) or the fire's
// (last_fired_at).
var settableScheduleColumns = []string{"id", "name", "topic", "args", "priority", "max_attempts", "kind",
	"expression", "time_zone", "enabled", "next_run_at"}

// scheduleError maps the name's unique index to AlreadyExists naming
// "name"; everything else goes through interpretError.
func scheduleError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "schedules_name_key" {
		return &apierr.Error{Kind: apierr.KindAlreadyExists, Field: "name", Msg: op + ": a schedule with this name already exists"}
	}
	if errors.As(err, &pgErr) && pgErr.Code == "23514" {
		if f, ok := scheduleConstraintFields[pgErr.ConstraintName]; ok {
			return apierr.Invalid(f, "%s: %s", op, pgErr.Message)
		}
	}
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return readError(op, err)
}

var scheduleConstraintFields = map[string]string{
	"schedules_name_format":        "name",
	"schedules_topic_format":       "topic",
	"schedules_args_object":        "args",
	"schedules_priority_range":     "priority",
	"schedules_max_attempts_range": "max_attempts",
	"schedules_kind_known":         "kind",
	"schedules_expression_present": "expression",
}

// CreateSchedule inserts sc (ID, NextRunAt and the fields set by the
// caller) and returns the stored row.
func (s *Store) CreateSchedule(ctx context.Context, sc Schedule) (*Schedule, error) {
	if sc.TimeZone == "" {
		sc.TimeZone = "UTC"
	}
	if len(sc.Args) == 0 {
		sc.Args = []byte("{}")
	}
	out := sc
	err := s.reads().NewInsert().Model(&out).Column(settableScheduleColumns...).
		Value("args", argsValue, string(sc.Args)).Returning("*").Scan(ctx)
	if err != nil {
		return nil, scheduleError("create schedule", err)
	}
	return &out, nil
}

// GetSchedule reads one schedule.
func (s *Store) GetSchedule(ctx context.Context, id uuid.UUID) (*Schedule, error) {
	var out Schedule
	err := s.reads().NewSelect().Model(&out).Where("id = ?", id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, apierr.NotFound("schedule", id.String())
	}
	if err != nil {
		return nil, scheduleError("get schedule", err)
	}
	return &out, nil
}

// ListSchedules returns schedules by name, those after afterName (empty:
// from the start), at most limit.
func (s *Store) ListSchedules(ctx context.Context, afterName string, limit int) ([]*Schedule, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []*Schedule
	err := s.reads().NewSelect().Model(&out).Where("name > ?", afterName).OrderExpr("name").Limit(int64(limit)).Scan(ctx)
	if err != nil {
		return nil, scheduleError("list schedules", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// UpdateSchedule replaces every settable field of the schedule sc.ID
// (the caller recomputes NextRunAt when the expression changed) and
// returns the stored row.
func (s *Store) UpdateSchedule(ctx context.Context, sc Schedule) (*Schedule, error) {
	if sc.TimeZone == "" {
		sc.TimeZone = "UTC"
	}
	if len(sc.Args) == 0 {
		sc.Args = []byte("{}")
	}
	out := sc
	err := s.reads().NewUpdate().Model(&out).Column(settableScheduleColumns[1:]...).
		Value("args", argsValue, string(sc.Args)).WherePK().Returning("*").Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, apierr.NotFound("schedule", sc.ID.String())
	}
	if err != nil {
		return nil, scheduleError("update schedule", err)
	}
	return &out, nil
}

// SetScheduleEnabled enables or disables a schedule. Enabling sets the
// cursor to next (the caller's first occurrence after now) so a schedule
// disabled for a week does not fire its missed occurrences; disabling
// keeps the cursor.
func (s *Store) SetScheduleEnabled(ctx context.Context, id uuid.UUID, enabled bool, next *time.Time) (*Schedule, error) {
	var out Schedule
	err := s.reads().NewUpdate().Model(&out).
		Set("enabled = ?", enabled).
		Set("next_run_at = CASE WHEN ? AND NOT enabled THEN ?::timestamptz ELSE next_run_at END", enabled, next).
		Where("id = ?", id).Returning("*").Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, apierr.NotFound("schedule", id.String())
	}
	if err != nil {
		return nil, scheduleError("set schedule enabled", err)
	}
	return &out, nil
}

// DeleteSchedule removes a schedule; the jobs it already fired stay.
func (s *Store) DeleteSchedule(ctx context.Context, id uuid.UUID) error {
	res, err := s.reads().NewDelete().Model((*Schedule)(nil)).Where("id = ?", id).Exec(ctx)
	if err != nil {
		return scheduleError("delete schedule", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return apierr.NotFound("schedule", id.String())
	}
	return nil
}

// HistoryCursor is the position after the last job of a fire-history page.
type HistoryCursor struct {
	SubmittedAt time.Time
	ID          uuid.UUID
}

// ScheduleJobs returns the jobs a schedule fired, newest first, after
// cursor (nil: from the newest), at most limit, without their args (the
// schedule's own).
func (s *Store) ScheduleJobs(ctx context.Context, id uuid.UUID, after *HistoryCursor, limit int) ([]*Job, error) {
	if limit <= 0 {
		return nil, nil
	}
	// Without args: a fired job's are its schedule's, and a page of 500
	// jobs of 1 MiB args each would be 500 MiB.
	var rows []jobRow
	q := s.reads().NewSelect().Model(&rows).ColumnExpr(jobColumnsWithoutArgs).ColumnExpr(intervalMicrosSQL).
		Where("j.schedule_id = ?", id)
	if after != nil {
		q = q.Where("(j.submitted_at, j.id) < (?, ?)", after.SubmittedAt, after.ID)
	}
	if err := q.OrderExpr("j.submitted_at DESC, j.id DESC").Limit(int64(limit)).Scan(ctx); err != nil {
		return nil, readError("list schedule jobs", err)
	}
	return jobsOf(rows), nil
}

// occurrenceNamespace is the uuid v5 namespace of fired jobs' ids.
var occurrenceNamespace = uuid.MustParse("6f1c9e52-3c0b-4b8e-9a53-5c1f0d7a2e41")

// OccurrenceJobID is the id of the job a schedule fires for occurrence:
// uuid v5 of "schedule id|occurrence in RFC 3339 (UTC, nanoseconds)". Any
// replica computes the same id, so a re-fire inserts nothing.
func OccurrenceJobID(scheduleID uuid.UUID, occurrence time.Time) uuid.UUID {
	return uuid.NewSHA1(occurrenceNamespace, []byte(scheduleID.String()+"|"+occurrence.UTC().Format(time.RFC3339Nano)))
}

// Fire is what the scheduler decided for one due schedule.
type Fire struct {
	// Job is the job to insert; Skip leaves the job out (a schedule whose
	// expression no longer parses) and only moves the cursor.
	Job  pulsetype.NewJob
	Skip bool
	// Occurrence is recorded as last_fired_at; the zero time (a skipped
	// schedule with no occurrence) leaves last_fired_at as it was.
	Occurrence time.Time
	// Next is the new cursor; nil stops the schedule (an at schedule).
	Next *time.Time
}

// Fired reports one schedule fired by FireDue.
type Fired struct {
	Schedule   *Schedule
	Fire       Fire
	Inserted   bool // false: the job existed (a re-fire)
	CursorMove bool // false: another firer moved the cursor first
}

// FireDue fires up to limit schedules due at now (enabled, next_run_at <=
// now), in one transaction: it locks them FOR UPDATE SKIP LOCKED (another
// replica's rows are skipped, not waited for), asks plan what to fire for
// each, inserts each job (ON CONFLICT DO NOTHING: a re-fired occurrence is
// a no-op) and moves each cursor by compare-and-set on next_run_at.
func (s *Store) FireDue(ctx context.Context, now time.Time, limit int, plan func(*Schedule) Fire) ([]Fired, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, interpretError("fire schedules", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	rows, err := tx.Query(ctx, `SELECT `+scheduleColumns+` FROM schedules
		WHERE enabled AND next_run_at <= $1
		ORDER BY next_run_at LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
	if err != nil {
		return nil, interpretError("fire schedules", err)
	}
	var due []*Schedule
	for rows.Next() {
		sc := new(Schedule)
		if err := rows.Scan(scanDests(scheduleTable, sc)...); err != nil {
			rows.Close()
			return nil, interpretError("fire schedules", err)
		}
		due = append(due, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("fire schedules", err)
	}

	out := make([]Fired, 0, len(due))
	for _, sc := range due {
		f := plan(sc)
		fired := Fired{Schedule: sc, Fire: f}
		if !f.Skip {
			tag, err := tx.Exec(ctx, insertSQL, insertParams([]pulsetype.NewJob{f.Job})...)
			if err != nil {
				return nil, interpretError("fire schedule "+sc.Name, err)
			}
			fired.Inserted = tag.RowsAffected() == 1
		}
		var occurrence *time.Time
		if !f.Occurrence.IsZero() {
			occurrence = &f.Occurrence
		}
		tag, err := tx.Exec(ctx, `UPDATE schedules SET next_run_at = $3, last_fired_at = COALESCE($4, last_fired_at)
			WHERE id = $1 AND next_run_at = $2`, sc.ID, sc.NextRunAt, f.Next, occurrence)
		if err != nil {
			return nil, interpretError("advance schedule "+sc.Name, err)
		}
		fired.CursorMove = tag.RowsAffected() == 1
		out = append(out, fired)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, interpretError("fire schedules", err)
	}
	return out, nil
}

// NextScheduleDue is the earliest cursor of an enabled schedule; ok is
// false when none is pending.
func (s *Store) NextScheduleDue(ctx context.Context) (next time.Time, ok bool, err error) {
	var t *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT min(next_run_at) FROM schedules WHERE enabled`).Scan(&t); err != nil {
		return time.Time{}, false, interpretError("next schedule due", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return *t, true, nil
}

// ScheduleCounts are the schedules gauge's values.
type ScheduleCounts struct {
	Enabled int
	Due     int
}

// CountSchedules counts enabled schedules and those due at now.
func (s *Store) CountSchedules(ctx context.Context, now time.Time) (ScheduleCounts, error) {
	var c ScheduleCounts
	err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE enabled),
		count(*) FILTER (WHERE enabled AND next_run_at <= $1) FROM schedules`, now).Scan(&c.Enabled, &c.Due)
	if err != nil {
		return c, interpretError("count schedules", err)
	}
	return c, nil
}
