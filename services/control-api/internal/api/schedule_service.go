package api

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/schedule"
	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// Paging bounds for ListSchedules and ListScheduleJobs.
const (
	SchedulesLimitDefault = 50
	SchedulesLimitMax     = 500
)

// ScheduleStore is the part of jobstore.Store that schedules use.
type ScheduleStore interface {
	CreateSchedule(ctx context.Context, sc jobstore.Schedule) (*jobstore.Schedule, error)
	GetSchedule(ctx context.Context, id uuid.UUID) (*jobstore.Schedule, error)
	ListSchedules(ctx context.Context, afterName string, limit int) ([]*jobstore.Schedule, error)
	UpdateSchedule(ctx context.Context, sc jobstore.Schedule) (*jobstore.Schedule, error)
	SetScheduleEnabled(ctx context.Context, id uuid.UUID, enabled bool, next *time.Time) (*jobstore.Schedule, error)
	DeleteSchedule(ctx context.Context, id uuid.UUID) error
	ScheduleJobs(ctx context.Context, id uuid.UUID, after *jobstore.HistoryCursor, limit int) ([]*jobstore.Job, error)
}

// Schedules implements pulsev1.ScheduleServiceServer. Its errors are
// apierr errors naming the field at fault ("name", "kind", "expression",
// "time_zone", ...), mapped by each transport; a duplicate name is
// AlreadyExists on "name".
type Schedules struct {
	pulsev1.UnimplementedScheduleServiceServer

	store  ScheduleStore
	now    func() time.Time
	logger *slog.Logger
}

// NewSchedules returns the service on store; now nil means time.Now.
func NewSchedules(store ScheduleStore, now func() time.Time, logger *slog.Logger) *Schedules {
	if now == nil {
		now = time.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Schedules{store: store, now: now, logger: logger}
}

// validDefinition checks d and returns the row fields and the parsed
// schedule.
func validDefinition(d *pulsev1.ScheduleDefinition) (jobstore.Schedule, schedule.Schedule, error) {
	var sc jobstore.Schedule
	if d == nil {
		return sc, nil, apierr.Invalid("definition", "is required")
	}
	if d.GetName() == "" {
		return sc, nil, apierr.Invalid("name", "is required")
	}
	if !jobspec.TopicPattern.MatchString(d.GetName()) {
		return sc, nil, apierr.Invalid("name", "%q has characters outside [A-Za-z0-9._:-], does not start with a letter or digit, or is over 128 characters", d.GetName())
	}
	if err := jobspec.ValidateTopic("topic", d.GetTopic()); err != nil {
		return sc, nil, err
	}
	args, err := jobspec.ValidateArgs("args", d.GetArgs(), 0)
	if err != nil {
		return sc, nil, err
	}
	// Unset, a schedule's jobs get a job's default priority.
	prio := int32(pulsetype.DefaultPriority)
	if d.GetHasPriority() || d.GetPriority() != 0 {
		prio = d.GetPriority()
	}
	if prio < pulsetype.MinPriority || prio > pulsetype.MaxPriority {
		return sc, nil, apierr.Invalid("priority", "is %d; it must be %d..%d", prio, pulsetype.MinPriority, pulsetype.MaxPriority)
	}
	maxAttempts := d.GetMaxAttempts()
	if maxAttempts == 0 {
		maxAttempts = pulsetype.DefaultMaxAttempts
	}
	if maxAttempts < pulsetype.MinMaxAttempts || maxAttempts > pulsetype.MaxMaxAttempts {
		return sc, nil, apierr.Invalid("max_attempts", "is %d; it must be %d..%d", maxAttempts, pulsetype.MinMaxAttempts, pulsetype.MaxMaxAttempts)
	}
	for _, f := range []struct{ name, value string }{
		{"kind", d.GetKind()}, {"expression", d.GetExpression()}, {"time_zone", d.GetTimeZone()},
	} {
		if err := storable.Text(f.name, f.value); err != nil {
			return sc, nil, err
		}
	}
	tz := d.GetTimeZone()
	if tz == "" {
		tz = "UTC"
	}
	s, err := schedule.Parse(d.GetKind(), d.GetExpression(), tz)
	if err != nil {
		return sc, nil, err
	}
	sc = jobstore.Schedule{
		Name: d.GetName(), Topic: d.GetTopic(), Args: args, Priority: int16(prio),
		MaxAttempts: maxAttempts, Kind: d.GetKind(), Expression: d.GetExpression(), TimeZone: tz,
	}
	return sc, s, nil
}

// firstOccurrence is where a new (or re-expressed, or re-enabled)
// schedule's cursor starts. A schedule with no first occurrence, or one
// outside the times pulse stores, is refused naming its expression: a zero
// cursor would fire at once, with a zero time.
func firstOccurrence(parsed schedule.Schedule, now time.Time) (time.Time, error) {
	first := parsed.First(now)
	if first.IsZero() {
		return time.Time{}, apierr.Invalid("expression", "never fires: it has no occurrence after %s", now.UTC().Format(time.RFC3339))
	}
	if err := storable.Time("expression", first); err != nil {
		return time.Time{}, apierr.Invalid("expression", "first fires at %s; it must fire between %s and %s",
			first.UTC().Format(time.RFC3339), storable.MinTime.Format(time.RFC3339), storable.MaxTime.Format(time.RFC3339))
	}
	return first, nil
}

// CreateSchedule validates and stores a schedule.
func (s *Schedules) CreateSchedule(ctx context.Context, req *pulsev1.CreateScheduleRequest) (*pulsev1.Schedule, error) {
	sc, parsed, err := validDefinition(req.GetDefinition())
	if err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	first, err := firstOccurrence(parsed, s.now())
	if err != nil {
		return nil, err
	}
	sc.ID, sc.Enabled, sc.NextRunAt = id, !req.GetDisabled(), &first
	out, err := s.store.CreateSchedule(ctx, sc)
	if err != nil {
		return nil, err
	}
	s.logger.Info("schedule created", "schedule", out.Name, "schedule_id", out.ID, "kind", out.Kind, "expression", out.Expression)
	return ScheduleToWire(out), nil
}

// GetSchedule reads one schedule.
func (s *Schedules) GetSchedule(ctx context.Context, req *pulsev1.GetScheduleRequest) (*pulsev1.Schedule, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	out, err := s.store.GetSchedule(ctx, id)
	if err != nil {
		return nil, err
	}
	return ScheduleToWire(out), nil
}

func pageLimit(limit int32) (int, error) {
	switch {
	case limit == 0:
		return SchedulesLimitDefault, nil
	case limit < 1 || limit > SchedulesLimitMax:
		return 0, apierr.Invalid("limit", "is %d; it must be 1..%d", limit, SchedulesLimitMax)
	}
	return int(limit), nil
}

// ListSchedules pages schedules by name; the page token is the last name,
// base64url.
func (s *Schedules) ListSchedules(ctx context.Context, req *pulsev1.ListSchedulesRequest) (*pulsev1.ListSchedulesResponse, error) {
	limit, err := pageLimit(req.GetLimit())
	if err != nil {
		return nil, err
	}
	// The token is the last listed name: it must decode strictly to a name
	// a schedule can have, or it never reaches SQL.
	after, ok := decodeToken(req.GetPageToken())
	if !ok || (len(after) > 0 && !jobspec.TopicPattern.Match(after)) {
		return nil, apierr.Invalid("page_token", "%q is not a page token from an earlier ListSchedules answer", req.GetPageToken())
	}
	list, err := s.store.ListSchedules(ctx, string(after), limit)
	if err != nil {
		return nil, err
	}
	out := &pulsev1.ListSchedulesResponse{}
	for _, sc := range list {
		out.Schedules = append(out.Schedules, ScheduleToWire(sc))
	}
	if len(list) == limit {
		out.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(list[limit-1].Name))
	}
	return out, nil
}

// UpdateSchedule replaces the definition; a changed kind, expression or
// time zone moves the cursor to the first occurrence after now.
func (s *Schedules) UpdateSchedule(ctx context.Context, req *pulsev1.UpdateScheduleRequest) (*pulsev1.Schedule, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	sc, parsed, err := validDefinition(req.GetDefinition())
	if err != nil {
		return nil, err
	}
	cur, err := s.store.GetSchedule(ctx, id)
	if err != nil {
		return nil, err
	}
	sc.ID, sc.Enabled, sc.NextRunAt = id, cur.Enabled, cur.NextRunAt
	if sc.Kind != cur.Kind || sc.Expression != cur.Expression || sc.TimeZone != cur.TimeZone {
		first, err := firstOccurrence(parsed, s.now())
		if err != nil {
			return nil, err
		}
		sc.NextRunAt = &first
	}
	out, err := s.store.UpdateSchedule(ctx, sc)
	if err != nil {
		return nil, err
	}
	s.logger.Info("schedule updated", "schedule", out.Name, "schedule_id", out.ID, "kind", out.Kind, "expression", out.Expression)
	return ScheduleToWire(out), nil
}

// EnableSchedule resumes firing from the first occurrence after now: the
// occurrences missed while disabled are not fired.
func (s *Schedules) EnableSchedule(ctx context.Context, req *pulsev1.EnableScheduleRequest) (*pulsev1.Schedule, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	cur, err := s.store.GetSchedule(ctx, id)
	if err != nil {
		return nil, err
	}
	parsed, err := schedule.Parse(cur.Kind, cur.Expression, cur.TimeZone)
	if err != nil {
		return nil, err
	}
	var next *time.Time
	if cur.Kind == schedule.KindAt {
		next = cur.NextRunAt // an at schedule that fired stays fired
	} else {
		first, err := firstOccurrence(parsed, s.now())
		if err != nil {
			return nil, err
		}
		next = &first
	}
	out, err := s.store.SetScheduleEnabled(ctx, id, true, next)
	if err != nil {
		return nil, err
	}
	return ScheduleToWire(out), nil
}

// DisableSchedule stops firing; the cursor is kept.
func (s *Schedules) DisableSchedule(ctx context.Context, req *pulsev1.DisableScheduleRequest) (*pulsev1.Schedule, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	out, err := s.store.SetScheduleEnabled(ctx, id, false, nil)
	if err != nil {
		return nil, err
	}
	return ScheduleToWire(out), nil
}

// DeleteSchedule removes a schedule; the jobs it fired stay.
func (s *Schedules) DeleteSchedule(ctx context.Context, req *pulsev1.DeleteScheduleRequest) (*pulsev1.DeleteScheduleResponse, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	if err := s.store.DeleteSchedule(ctx, id); err != nil {
		return nil, err
	}
	s.logger.Info("schedule deleted", "schedule_id", id)
	return &pulsev1.DeleteScheduleResponse{}, nil
}

// ListScheduleJobs pages a schedule's fired jobs, newest first. The page
// token is base64url of the last job's submitted_at (unix microseconds,
// 8 bytes) and id (16 bytes).
func (s *Schedules) ListScheduleJobs(ctx context.Context, req *pulsev1.ListScheduleJobsRequest) (*pulsev1.ListScheduleJobsResponse, error) {
	id, err := ParseJobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	limit, err := pageLimit(req.GetLimit())
	if err != nil {
		return nil, err
	}
	var after *jobstore.HistoryCursor
	if tok := req.GetPageToken(); tok != "" {
		b, ok := decodeToken(tok)
		var at time.Time
		if ok && len(b) == 24 {
			at = time.UnixMicro(int64(binary.BigEndian.Uint64(b[:8])))
		}
		if !ok || len(b) != 24 || storable.Time("page_token", at) != nil {
			return nil, apierr.Invalid("page_token", "%q is not a page token from an earlier ListScheduleJobs answer", tok)
		}
		after = &jobstore.HistoryCursor{SubmittedAt: at, ID: uuid.UUID(b[8:])}
	}
	if _, err := s.store.GetSchedule(ctx, id); err != nil && apierr.KindOf(err) != apierr.KindNotFound {
		return nil, err
	}
	jobs, err := s.store.ScheduleJobs(ctx, id, after, limit)
	if err != nil {
		return nil, err
	}
	out := &pulsev1.ListScheduleJobsResponse{}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, JobToWire(j))
	}
	if len(jobs) == limit {
		last := jobs[limit-1]
		b := binary.BigEndian.AppendUint64(nil, uint64(last.SubmittedAt.UnixMicro()))
		b = append(b, last.ID[:]...)
		out.NextPageToken = base64.RawURLEncoding.EncodeToString(b)
	}
	return out, nil
}

// ScheduleToWire converts a stored schedule to its wire form.
func ScheduleToWire(sc *jobstore.Schedule) *pulsev1.Schedule {
	return &pulsev1.Schedule{
		Id: sc.ID.String(),
		Definition: &pulsev1.ScheduleDefinition{
			Name: sc.Name, Topic: sc.Topic, Args: sc.Args, Priority: int32(sc.Priority), HasPriority: true, MaxAttempts: sc.MaxAttempts,
			Kind: sc.Kind, Expression: sc.Expression, TimeZone: sc.TimeZone,
		},
		Enabled:     sc.Enabled,
		NextRunAt:   timestampOrNil(sc.NextRunAt),
		LastFiredAt: timestampOrNil(sc.LastFiredAt),
		CreatedAt:   timestamppb.New(sc.CreatedAt),
		UpdatedAt:   timestamppb.New(sc.UpdatedAt),
	}
}
