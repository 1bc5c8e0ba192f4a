package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"strconv"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/pausewire"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// pauseBodyLimit bounds a pause or resume body: a 500-character reason and
// a few short fields.
const pauseBodyLimit = 16 << 10

// DispatchService is what the dispatch routes call: api.DispatchControl.
type DispatchService interface {
	GetDispatchState(ctx context.Context, req *pulsev1.GetDispatchStateRequest) (*pulsev1.GetDispatchStateResponse, error)
	Pause(ctx context.Context, req *pulsev1.PauseDispatchRequest, forField string) (*pulsev1.PauseDispatchResponse, error)
	ResumeDispatch(ctx context.Context, req *pulsev1.ResumeDispatchRequest) (*pulsev1.ResumeDispatchResponse, error)
	ListDispatchEvents(ctx context.Context, req *pulsev1.ListDispatchEventsRequest) (*pulsev1.ListDispatchEventsResponse, error)
}

// RegisterDispatch mounts the pause routes (docs/pause.md) on mux.
func (h *Handler) RegisterDispatch(mux Mux, svc DispatchService) {
	d := &dispatchRoutes{svc: svc}
	h.mount(mux, "GET /v1/dispatch", h.route(d.state))
	h.mount(mux, "POST /v1/dispatch/pause", h.route(d.pause))
	h.mount(mux, "POST /v1/dispatch/resume", h.route(d.resume))
	h.mount(mux, "GET /v1/dispatch/events", h.route(d.events))
}

type dispatchRoutes struct {
	svc DispatchService
}

// pauseJSON is the body of POST /v1/dispatch/pause.
type pauseJSON = pulsehttp.Pause

type resumeJSON = pulsehttp.Resume

type scopeJSON = pulsehttp.ScopeState

type scopeStatusJSON = pulsehttp.ScopeStatus

type dispatchStateJSON = pulsehttp.DispatchState

type controlResultJSON = pulsehttp.ControlResult

type eventJSON = pulsehttp.Event

type eventsJSON = pulsehttp.EventList

func (d *dispatchRoutes) state(w http.ResponseWriter, r *http.Request) error {
	resp, err := d.svc.GetDispatchState(r.Context(), &pulsev1.GetDispatchStateRequest{})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, DispatchStateToJSON(resp))
}

func (d *dispatchRoutes) pause(w http.ResponseWriter, r *http.Request) error {
	var in pauseJSON
	if err := readControlBody(w, r, &in); err != nil {
		return err
	}
	req, err := PauseToWire(in)
	if err != nil {
		return err
	}
	resp, err := d.svc.Pause(r.Context(), req, "for")
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, controlResultJSON{Changed: resp.GetChanged(), State: scopeToJSON(resp.GetState())})
}

func (d *dispatchRoutes) resume(w http.ResponseWriter, r *http.Request) error {
	var in resumeJSON
	if err := readControlBody(w, r, &in); err != nil {
		return err
	}
	resp, err := d.svc.ResumeDispatch(r.Context(), &pulsev1.ResumeDispatchRequest{Topic: in.Topic})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, controlResultJSON{Changed: resp.GetChanged(), State: scopeToJSON(resp.GetState())})
}

// eventsParams are the query parameters GET /v1/dispatch/events understands.
var eventsParams = []string{"limit", "page_token"}

func (d *dispatchRoutes) events(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := onlyParams(q, eventsParams); err != nil {
		return err
	}
	req := &pulsev1.ListDispatchEventsRequest{PageToken: q.Get("page_token")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return apierr.Invalid("limit", "%q is not a whole number", s)
		}
		if n == 0 {
			return apierr.Invalid("limit", "is 0; it must be between 1 and %d", api.EventsLimitMax)
		}
		req.Limit = int32(n)
	}
	resp, err := d.svc.ListDispatchEvents(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, EventsToJSON(resp))
}

// readControlBody decodes a small JSON object strictly; an empty body is
// {} (so `curl -X POST .../resume` resumes everything).
func readControlBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := readBody(w, r, pauseBodyLimit, "body", "")
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return decodeStorable(body, "", v)
}

func scopeToJSON(s *pulsev1.ScopeState) scopeJSON {
	return scopeJSON{
		Scope: s.GetScope(), Paused: s.GetPaused(), Mode: pausewire.ModeName(s.GetMode()), Reason: s.GetReason(), Actor: s.GetActor(),
		PausedAt: api.TimeFromWire(s.GetPausedAt()), Until: api.TimeFromWire(s.GetUntil()), UpdatedAt: api.TimeFromWire(s.GetUpdatedAt()),
		Version: s.GetVersion(),
	}
}
