package ui

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/pausewire"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// eventRow is one entry of the pause audit log.
type eventRow struct {
	ID      int64
	At      *time.Time
	Scope   string
	Action  string // "pause" or "resume"
	Mode    string
	Reason  string
	Actor   string
	Until   *time.Time
	Version int64
}

type auditView struct {
	Events   []eventRow
	NextURL  string
	FirstURL string
}

func (d *Dashboard) audit(w http.ResponseWriter, r *http.Request) error {
	tok := r.URL.Query().Get("page_token")
	resp, err := d.dispatch.ListDispatchEvents(r.Context(), &pulsev1.ListDispatchEventsRequest{Limit: pageSize, PageToken: tok})
	if err != nil {
		return err
	}
	var view auditView
	for _, e := range resp.GetEvents() {
		scope := e.GetScope()
		if scope == "*" {
			scope = "all topics"
		}
		view.Events = append(view.Events, eventRow{
			ID: e.GetId(), At: api.TimeFromWire(e.GetAt()), Scope: scope,
			Action: strings.ToLower(strings.TrimPrefix(e.GetAction().String(), "DISPATCH_ACTION_")),
			Mode:   pausewire.ModeName(e.GetMode()), Reason: e.GetReason(), Actor: e.GetActor(),
			Until: api.TimeFromWire(e.GetUntil()), Version: e.GetVersion(),
		})
	}
	if tok != "" {
		view.FirstURL = "/ui/audit"
	}
	if next := resp.GetNextPageToken(); next != "" {
		view.NextURL = withQuery("/ui/audit", url.Values{"page_token": {next}})
	}
	d.render(w, r, http.StatusOK, "audit", view)
	return nil
}
