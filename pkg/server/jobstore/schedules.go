package jobstore

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// SchedulesChannel is the NOTIFY channel the schedules trigger sends on
// after every insert, update or delete; schedulers wake on it.
const SchedulesChannel = "pulse_schedules_changed"

// Schedule is one row of schedules. Kind, Expression and TimeZone are
// validated by package schedule before they reach the store.
type Schedule struct {
	ID          uuid.UUID
	Name        string
	Topic       string
	Args        []byte // a JSON object
	Priority    int16
	MaxAttempts int32
	Kind        string
	Expression  string
	TimeZone    string
	Enabled     bool
	// NextRunAt is the cursor: the next occurrence to fire; nil once an at
	// schedule has fired.
	NextRunAt   *time.Time
	LastFiredAt *time.Time
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

const scheduleColumns = `id, name, topic, args, priority, max_attempts, kind, expression, time_zone,
	enabled, next_run_at, last_fired_at, created_at, updated_at`

func scanSchedule(row rowScanner) (*Schedule, error) {
	var s Schedule
	if err := row.Scan(&s.ID, &s.Name, &s.Topic, &s.Args, &s.Priority, &s.MaxAttempts, &s.Kind,
		&s.Expression, &s.TimeZone, &s.Enabled, &s.NextRunAt, &s.LastFiredAt, &s.CreatedAt, &s.UpdatedAt); err != nil {
		return nil, err
	}
	return &s, nil
}

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
	if errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	return interpretError(op, err)
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
	out, err := scanSchedule(s.pool.QueryRow(ctx, `
		INSERT INTO schedules (id, name, topic, args, priority, max_attempts, kind, expression,
		                       time_zone, enabled, next_run_at)
		VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7, $8, $9, $10, $11)
		RETURNING `+scheduleColumns,
		sc.ID, sc.Name, sc.Topic, string(sc.Args), sc.Priority, sc.MaxAttempts, sc.Kind, sc.Expression,
		sc.TimeZone, sc.Enabled, sc.NextRunAt))
	if err != nil {
		return nil, scheduleError("create schedule", err)
	}
	return out, nil
}

// GetSchedule reads one schedule.
func (s *Store) GetSchedule(ctx context.Context, id uuid.UUID) (*Schedule, error) {
	out, err := scanSchedule(s.pool.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, apierr.NotFound("schedule", id.String())
	}
	if err != nil {
		return nil, scheduleError("get schedule", err)
	}
	return out, nil
}

// ListSchedules returns schedules by name, those after afterName (empty:
// from the start), at most limit.
func (s *Store) ListSchedules(ctx context.Context, afterName string, limit int) ([]*Schedule, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+scheduleColumns+` FROM schedules
		WHERE name > $1 ORDER BY name LIMIT $2`, afterName, limit)
	if err != nil {
		return nil, scheduleError("list schedules", err)
	}
	defer rows.Close()
	var out []*Schedule
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, scheduleError("list schedules", err)
		}
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, scheduleError("list schedules", err)
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
	out, err := scanSchedule(s.pool.QueryRow(ctx, `
		UPDATE schedules SET name = $2, topic = $3, args = $4::text::jsonb, priority = $5,
		       max_attempts = $6, kind = $7, expression = $8, time_zone = $9, enabled = $10,
		       next_run_at = $11
		WHERE id = $1
		RETURNING `+scheduleColumns,
		sc.ID, sc.Name, sc.Topic, string(sc.Args), sc.Priority, sc.MaxAttempts, sc.Kind, sc.Expression,
		sc.TimeZone, sc.Enabled, sc.NextRunAt))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, apierr.NotFound("schedule", sc.ID.String())
	}
	if err != nil {
		return nil, scheduleError("update schedule", err)
	}
	return out, nil
}

// SetScheduleEnabled enables or disables a schedule. Enabling sets the
// cursor to next (the caller's first occurrence after now) so a schedule
// disabled for a week does not fire its missed occurrences; disabling
// keeps the cursor.
func (s *Store) SetScheduleEnabled(ctx context.Context, id uuid.UUID, enabled bool, next *time.Time) (*Schedule, error) {
	out, err := scanSchedule(s.pool.QueryRow(ctx, `
		UPDATE schedules SET enabled = $2,
		       next_run_at = CASE WHEN $2 AND NOT enabled THEN $3 ELSE next_run_at END
		WHERE id = $1
		RETURNING `+scheduleColumns, id, enabled, next))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, apierr.NotFound("schedule", id.String())
	}
	if err != nil {
		return nil, scheduleError("set schedule enabled", err)
	}
	return out, nil
}

// DeleteSchedule removes a schedule; the jobs it already fired stay.
func (s *Store) DeleteSchedule(ctx context.Context, id uuid.UUID) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM schedules WHERE id = $1`, id)
	if err != nil {
		return scheduleError("delete schedule", err)
	}
	if tag.RowsAffected() == 0 {
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
// cursor (nil: from the newest), at most limit.
func (s *Store) ScheduleJobs(ctx context.Context, id uuid.UUID, after *HistoryCursor, limit int) ([]*Job, error) {
	var at *time.Time
	var aid *uuid.UUID
	if after != nil {
		at, aid = &after.SubmittedAt, &after.ID
	}
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs
		WHERE schedule_id = $1 AND ($2::timestamptz IS NULL OR (submitted_at, id) < ($2, $3::uuid))
		ORDER BY submitted_at DESC, id DESC LIMIT $4`, id, at, aid, limit)
	if err != nil {
		return nil, interpretError("list schedule jobs", err)
	}
	defer rows.Close()
	var out []*Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, interpretError("list schedule jobs", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list schedule jobs", err)
	}
	return out, nil
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
	Job  NewJob
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
		sc, err := scanSchedule(rows)
		if err != nil {
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
			tag, err := tx.Exec(ctx, insertSQL, insertParams([]NewJob{f.Job})...)
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
