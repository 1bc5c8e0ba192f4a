package ui

import (
	"net/http"
	"net/url"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// scheduleRow is one schedule in the list.
type scheduleRow struct {
	ID         string
	Name       string
	Topic      string
	Kind       string
	Expression string
	TimeZone   string
	Enabled    bool
	NextRun    *time.Time
	LastFired  *time.Time
}

type scheduleListView struct {
	Schedules []scheduleRow
	NextURL   string
	FirstURL  string
}

func (d *Dashboard) scheduleList(w http.ResponseWriter, r *http.Request) error {
	tok := r.URL.Query().Get("page_token")
	resp, err := d.schedules.ListSchedules(r.Context(), &pulsev1.ListSchedulesRequest{Limit: pageSize, PageToken: tok})
	if err != nil {
		return err
	}
	var view scheduleListView
	for _, s := range resp.GetSchedules() {
		def := s.GetDefinition()
		view.Schedules = append(view.Schedules, scheduleRow{
			ID: s.GetId(), Name: def.GetName(), Topic: def.GetTopic(),
			Kind: def.GetKind(), Expression: def.GetExpression(), TimeZone: def.GetTimeZone(),
			Enabled: s.GetEnabled(), NextRun: api.TimeFromWire(s.GetNextRunAt()), LastFired: api.TimeFromWire(s.GetLastFiredAt()),
		})
	}
	if tok != "" {
		view.FirstURL = "/ui/schedules"
	}
	if next := resp.GetNextPageToken(); next != "" {
		view.NextURL = withQuery("/ui/schedules", url.Values{"page_token": {next}})
	}
	d.render(w, r, http.StatusOK, "schedules", view)
	return nil
}

func (d *Dashboard) enableSchedule(w http.ResponseWriter, r *http.Request) error {
	s, err := d.schedules.EnableSchedule(r.Context(), &pulsev1.EnableScheduleRequest{Id: r.PathValue("id")})
	return d.afterAction(w, r, "/ui/schedules", err, "Enabled schedule "+s.GetDefinition().GetName(), "Enable")
}

func (d *Dashboard) disableSchedule(w http.ResponseWriter, r *http.Request) error {
	s, err := d.schedules.DisableSchedule(r.Context(), &pulsev1.DisableScheduleRequest{Id: r.PathValue("id")})
	return d.afterAction(w, r, "/ui/schedules", err, "Disabled schedule "+s.GetDefinition().GetName(), "Disable")
}
