package ui

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/pausewire"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// scopeView is one pause scope with its drain progress.
type scopeView struct {
	Scope   string // "*" or a topic
	Name    string // "all topics" or the topic
	Global  bool
	Paused  bool
	Mode    string // "drain" or "quiesce"
	Reason  string
	Actor   string
	Since   *time.Time
	Until   *time.Time
	Queued  int64
	Running int64
	Drained bool
}

// statusView is the banner and the drain panel: the global scope and
// every topic scope that was ever paused.
type statusView struct {
	// Known is false when the state could not be read.
	Known bool
	// State is "running", "drain" or "quiesce": the global scope's, for
	// the banner's colour (green, amber, red).
	State        string
	Label        string
	Global       scopeView
	Scopes       []scopeView
	PausedTopics []scopeView
}

// status reads the dispatch state for the banner.
func (d *Dashboard) status(r *http.Request) statusView {
	resp, err := d.dispatch.GetDispatchState(r.Context(), &pulsev1.GetDispatchStateRequest{})
	if err != nil {
		d.logger.Warn("dashboard: read dispatch state", "error", err)
		return statusView{State: "unknown", Label: "Workers: state unknown (control-api cannot read it)"}
	}
	v := statusView{Known: true, State: "running", Label: "Workers: Running"}
	for _, s := range resp.GetScopes() {
		sv := scopeViewOf(s)
		if sv.Global {
			v.Global = sv
			// The global scope leads the drain panel.
			v.Scopes = append([]scopeView{sv}, v.Scopes...)
			continue
		}
		v.Scopes = append(v.Scopes, sv)
		if sv.Paused {
			v.PausedTopics = append(v.PausedTopics, sv)
		}
	}
	if v.Global.Paused {
		v.State = v.Global.Mode
		v.Label = "Workers: Paused (" + titleCase(v.Global.Mode) + ")"
	}
	return v
}

func scopeViewOf(s *pulsev1.ScopeStatus) scopeView {
	st := s.GetState()
	v := scopeView{
		Scope: st.GetScope(), Name: st.GetScope(), Global: st.GetScope() == "*",
		Paused: st.GetPaused(), Mode: pausewire.ModeName(st.GetMode()),
		Reason: st.GetReason(), Actor: st.GetActor(),
		Since: api.TimeFromWire(st.GetPausedAt()), Until: api.TimeFromWire(st.GetUntil()),
		Queued: s.GetQueued(), Running: s.GetRunning(), Drained: s.GetDrained(),
	}
	if v.Global {
		v.Name = "all topics"
	}
	return v
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// pauseForm is the Pause form as posted, shown again with its error.
type pauseForm struct {
	Mode   string
	Reason string
	Topic  string
	For    string
	Error  string
	// Field names the input the error is about.
	Field string
}

type overviewView struct {
	Pause pauseForm
	// Chart and Topics are nil when the dashboard has no such service.
	Chart  *chartView
	Topics *topicsView
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) error {
	d.render(w, r, http.StatusOK, "overview", d.overviewOf(r, pauseForm{Mode: "drain"}))
	return nil
}

// overviewOf reads the overview's numbers: the chart in the range the
// query names, and the per-topic table.
func (d *Dashboard) overviewOf(r *http.Request, pause pauseForm) overviewView {
	return overviewView{Pause: pause, Chart: d.chart(r), Topics: d.topicsOf(r)}
}

// chart reads the throughput chart for the page's range; a bad range or a
// failed read shows in the panel.
func (d *Dashboard) chart(r *http.Request) *chartView {
	if d.opts.Throughput == nil {
		return nil
	}
	name := r.URL.Query().Get("range")
	series, err := d.opts.Throughput.Series(r.Context(), name, "")
	if err != nil {
		if !isClientError(err) {
			d.logger.Warn("dashboard: read throughput", "error", err)
		}
		return &chartView{Range: name, Ranges: rangeLinks(name), Error: "The chart cannot be shown: " + err.Error()}
	}
	return chartOf(series)
}

// live is the fragment open pages fetch to refresh the banner and the
// drain panel in place; the overview's live URL names its chart range
// ("/ui/live?range=6h"), which adds the chart and the topic table.
func (d *Dashboard) live(w http.ResponseWriter, r *http.Request) error {
	var view *overviewView
	if r.URL.Query().Has("range") {
		v := d.overviewOf(r, pauseForm{})
		view = &v
	}
	d.render(w, r, http.StatusOK, "live", view)
	return nil
}

// pause posts the Pause form. A bad field shows the form again with what
// was typed and the error naming the field; nothing is paused.
func (d *Dashboard) pause(w http.ResponseWriter, r *http.Request) error {
	form := pauseForm{
		Mode:   r.PostFormValue("mode"),
		Reason: r.PostFormValue("reason"),
		Topic:  strings.TrimSpace(r.PostFormValue("topic")),
		For:    strings.TrimSpace(r.PostFormValue("for")),
	}
	req, err := pauseRequest(form)
	if err == nil {
		var resp *pulsev1.PauseDispatchResponse
		if resp, err = d.dispatch.Pause(r.Context(), req, "for"); err == nil {
			redirectWithFlash(w, r, backTo(r, "/ui/"), "ok", pausedMessage(resp))
			return nil
		}
	}
	if !isClientError(err) {
		return err
	}
	form.Error, form.Field = err.Error(), apierr.FieldOf(err)
	d.render(w, r, apierr.HTTPStatus(err), "overview", d.overviewOf(r, form))
	return nil
}

func pauseRequest(f pauseForm) (*pulsev1.PauseDispatchRequest, error) {
	req := &pulsev1.PauseDispatchRequest{Reason: f.Reason, Topic: f.Topic}
	if f.Mode != "" {
		mode, ok := pausewire.ModeNamed(f.Mode)
		if !ok {
			return nil, apierr.Invalid("mode", "%q is not a pause mode; use drain or quiesce", f.Mode)
		}
		req.Mode = mode
	}
	if f.For != "" {
		dur, err := time.ParseDuration(f.For)
		if err != nil {
			return nil, apierr.Invalid("for", "%q is not a duration; write it like 30m or 2h", f.For)
		}
		req.PauseFor = durationpb.New(dur)
	}
	return req, nil
}

func pausedMessage(resp *pulsev1.PauseDispatchResponse) string {
	st := resp.GetState()
	scope := "all topics"
	if st.GetScope() != "*" {
		scope = "topic " + st.GetScope()
	}
	verb := "Paused"
	if !resp.GetChanged() {
		verb = "Already paused:"
	}
	msg := fmt.Sprintf("%s %s (%s): %s", verb, scope, pausewire.ModeName(st.GetMode()), st.GetReason())
	if u := api.TimeFromWire(st.GetUntil()); u != nil {
		msg += "; resumes by itself at " + absTime(u)
	}
	return msg
}

// resume posts a Resume button: the global scope, or the topic it names.
func (d *Dashboard) resume(w http.ResponseWriter, r *http.Request) error {
	topic := strings.TrimSpace(r.PostFormValue("topic"))
	resp, err := d.dispatch.ResumeDispatch(r.Context(), &pulsev1.ResumeDispatchRequest{Topic: topic})
	back := backTo(r, "/ui/")
	if err != nil {
		if !isClientError(err) {
			return err
		}
		redirectWithFlash(w, r, back, "error", "Resume: "+err.Error())
		return nil
	}
	scope := "all topics"
	if topic != "" {
		scope = "topic " + topic
	}
	msg := "Resumed " + scope
	if !resp.GetChanged() {
		msg = "Not paused: " + scope
	}
	redirectWithFlash(w, r, back, "ok", msg)
	return nil
}
