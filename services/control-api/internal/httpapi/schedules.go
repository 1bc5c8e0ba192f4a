package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// scheduleBodyLimit bounds a schedule body: its args template (1 MiB,
// pulsetype.DefaultMaxArgsBytes) and a few short fields.
const scheduleBodyLimit = 1<<20 + 16<<10

// ScheduleService is what the schedule routes call: api.Schedules.
type ScheduleService interface {
	CreateSchedule(ctx context.Context, req *pulsev1.CreateScheduleRequest) (*pulsev1.Schedule, error)
	GetSchedule(ctx context.Context, req *pulsev1.GetScheduleRequest) (*pulsev1.Schedule, error)
	ListSchedules(ctx context.Context, req *pulsev1.ListSchedulesRequest) (*pulsev1.ListSchedulesResponse, error)
	UpdateSchedule(ctx context.Context, req *pulsev1.UpdateScheduleRequest) (*pulsev1.Schedule, error)
	EnableSchedule(ctx context.Context, req *pulsev1.EnableScheduleRequest) (*pulsev1.Schedule, error)
	DisableSchedule(ctx context.Context, req *pulsev1.DisableScheduleRequest) (*pulsev1.Schedule, error)
	DeleteSchedule(ctx context.Context, req *pulsev1.DeleteScheduleRequest) (*pulsev1.DeleteScheduleResponse, error)
	ListScheduleJobs(ctx context.Context, req *pulsev1.ListScheduleJobsRequest) (*pulsev1.ListScheduleJobsResponse, error)
}

// RegisterSchedules mounts the schedule routes on mux. Producers and
// operators read; operators write (AccessPolicy).
func (h *Handler) RegisterSchedules(mux Mux, svc ScheduleService) {
	s := &scheduleRoutes{svc: svc}
	h.mount(mux, "POST /v1/schedules", h.route(s.create))
	h.mount(mux, "GET /v1/schedules", h.route(s.list))
	h.mount(mux, "GET /v1/schedules/{id}", h.route(s.get))
	h.mount(mux, "PUT /v1/schedules/{id}", h.route(s.update))
	h.mount(mux, "DELETE /v1/schedules/{id}", h.route(s.delete))
	h.mount(mux, "POST /v1/schedules/{id}/enable", h.route(s.enable))
	h.mount(mux, "POST /v1/schedules/{id}/disable", h.route(s.disable))
	h.mount(mux, "GET /v1/schedules/{id}/jobs", h.route(s.jobs))
}

type scheduleRoutes struct {
	svc ScheduleService
}

// scheduleDefJSON is the body of POST /v1/schedules and PUT
// /v1/schedules/{id}.
type scheduleDefJSON = pulsehttp.ScheduleDef

type scheduleJSON = pulsehttp.Schedule

type scheduleListJSON = pulsehttp.ScheduleList

func scheduleDefToWire(d scheduleDefJSON) *pulsev1.ScheduleDefinition {
	def := &pulsev1.ScheduleDefinition{
		Name: d.Name, Topic: d.Topic, Args: d.Args, MaxAttempts: d.MaxAttempts,
		Kind: d.Kind, Expression: d.Expression, TimeZone: d.TimeZone,
	}
	if d.Priority != nil {
		def.Priority, def.HasPriority = *d.Priority, true
	}
	return def
}

// writeSchedule answers a call that returns a schedule: its error, or the
// schedule as JSON with status.
func writeSchedule(w http.ResponseWriter, status int, resp *pulsev1.Schedule, err error) error {
	if err != nil {
		return err
	}
	return writeJSON(w, status, scheduleToJSON(resp))
}

func scheduleToJSON(s *pulsev1.Schedule) scheduleJSON {
	d := s.GetDefinition()
	enabled := s.GetEnabled()
	priority := d.GetPriority()
	out := scheduleJSON{
		ID: s.GetId(),
		ScheduleDef: scheduleDefJSON{
			Name: d.GetName(), Topic: d.GetTopic(), Args: d.GetArgs(), Priority: &priority,
			MaxAttempts: d.GetMaxAttempts(), Kind: d.GetKind(), Expression: d.GetExpression(),
			TimeZone: d.GetTimeZone(), Enabled: &enabled,
		},
		NextRunAt: api.TimeFromWire(s.GetNextRunAt()), LastFiredAt: api.TimeFromWire(s.GetLastFiredAt()),
		CreatedAt: api.TimeFromWire(s.GetCreatedAt()), UpdatedAt: api.TimeFromWire(s.GetUpdatedAt()),
	}
	if len(out.Args) == 0 {
		out.Args = json.RawMessage(`{}`)
	}
	return out
}

func (s *scheduleRoutes) decode(w http.ResponseWriter, r *http.Request) (scheduleDefJSON, error) {
	var d scheduleDefJSON
	body, err := readBody(w, r, scheduleBodyLimit, "body", "")
	if err != nil {
		return d, err
	}
	return d, decodeStorable(body, "", &d)
}

func (s *scheduleRoutes) create(w http.ResponseWriter, r *http.Request) error {
	d, err := s.decode(w, r)
	if err != nil {
		return err
	}
	resp, err := s.svc.CreateSchedule(r.Context(), &pulsev1.CreateScheduleRequest{
		Definition: scheduleDefToWire(d), Disabled: d.Enabled != nil && !*d.Enabled,
	})
	return writeSchedule(w, http.StatusCreated, resp, err)
}

func (s *scheduleRoutes) update(w http.ResponseWriter, r *http.Request) error {
	d, err := s.decode(w, r)
	if err != nil {
		return err
	}
	if d.Enabled != nil {
		return apierr.Invalid("enabled", "is changed with POST /v1/schedules/{id}/enable or /disable")
	}
	resp, err := s.svc.UpdateSchedule(r.Context(), &pulsev1.UpdateScheduleRequest{Id: r.PathValue("id"), Definition: scheduleDefToWire(d)})
	return writeSchedule(w, http.StatusOK, resp, err)
}

func (s *scheduleRoutes) get(w http.ResponseWriter, r *http.Request) error {
	resp, err := s.svc.GetSchedule(r.Context(), &pulsev1.GetScheduleRequest{Id: r.PathValue("id")})
	return writeSchedule(w, http.StatusOK, resp, err)
}

func (s *scheduleRoutes) enable(w http.ResponseWriter, r *http.Request) error {
	resp, err := s.svc.EnableSchedule(r.Context(), &pulsev1.EnableScheduleRequest{Id: r.PathValue("id")})
	return writeSchedule(w, http.StatusOK, resp, err)
}

func (s *scheduleRoutes) disable(w http.ResponseWriter, r *http.Request) error {
	resp, err := s.svc.DisableSchedule(r.Context(), &pulsev1.DisableScheduleRequest{Id: r.PathValue("id")})
	return writeSchedule(w, http.StatusOK, resp, err)
}

func (s *scheduleRoutes) delete(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.svc.DeleteSchedule(r.Context(), &pulsev1.DeleteScheduleRequest{Id: r.PathValue("id")}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

var pageParams = []string{"limit", "page_token"}

func parseLimit(q string) (int32, error) {
	if q == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(q, 10, 32)
	if err != nil {
		return 0, apierr.Invalid("limit", "%q is not a whole number", q)
	}
	if n == 0 {
		return 0, apierr.Invalid("limit", "is 0; it must be between 1 and %d", api.SchedulesLimitMax)
	}
	return int32(n), nil
}

func (s *scheduleRoutes) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := onlyParams(q, pageParams); err != nil {
		return err
	}
	limit, err := parseLimit(q.Get("limit"))
	if err != nil {
		return err
	}
	resp, err := s.svc.ListSchedules(r.Context(), &pulsev1.ListSchedulesRequest{Limit: limit, PageToken: q.Get("page_token")})
	if err != nil {
		return err
	}
	out := scheduleListJSON{Schedules: make([]scheduleJSON, len(resp.GetSchedules())), NextPageToken: resp.GetNextPageToken()}
	for i, sc := range resp.GetSchedules() {
		out.Schedules[i] = scheduleToJSON(sc)
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *scheduleRoutes) jobs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := onlyParams(q, pageParams); err != nil {
		return err
	}
	limit, err := parseLimit(q.Get("limit"))
	if err != nil {
		return err
	}
	resp, err := s.svc.ListScheduleJobs(r.Context(), &pulsev1.ListScheduleJobsRequest{
		Id: r.PathValue("id"), Limit: limit, PageToken: q.Get("page_token"),
	})
	if err != nil {
		return err
	}
	out := listJSON{Jobs: make([]jobJSON, len(resp.GetJobs())), NextPageToken: resp.GetNextPageToken()}
	for i, j := range resp.GetJobs() {
		out.Jobs[i] = jobToJSON(j)
		out.Jobs[i].Args = nil // a fired job's args are its schedule's: left out
	}
	return writeJSON(w, http.StatusOK, out)
}
