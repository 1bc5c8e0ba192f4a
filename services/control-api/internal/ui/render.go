package ui

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// pageTemplate is one page: the layout, the shared partials and the page's
// own "content".
type pageTemplate struct {
	*template.Template
	// fragment pages (the live refresh) render without the layout.
	fragment bool
}

// partials are the templates every page set holds; the rest are pages.
var partials = map[string]bool{"layout.html": true, "partials.html": true}

// fragments render on their own, without the layout.
var fragments = map[string]bool{"live": true}

func mustParsePages(now func() time.Time) map[string]*pageTemplate {
	funcs := template.FuncMap{
		"abs":     absTime,
		"rel":     func(t *time.Time) string { return relTime(t, now()) },
		"shortid": shortID,
		"lower":   strings.ToLower,
		"topicsData": func(root pageData, v *topicsView) topicsData {
			return topicsData{CanAct: root.Viewer.CanAct, T: v}
		},
		"iso": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		},
	}
	base := template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html"))
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	pages := make(map[string]*pageTemplate)
	for _, file := range names {
		if partials[path.Base(file)] {
			continue
		}
		name := strings.TrimSuffix(path.Base(file), ".html")
		t := template.Must(template.Must(base.Clone()).ParseFS(templateFS, file))
		pages[name] = &pageTemplate{Template: t, fragment: fragments[name]}
	}
	return pages
}

// pageData is what every page template gets: the chrome (viewer, banner,
// flash, navigation) and the page's own View.
type pageData struct {
	Title     string
	Nav       string
	Viewer    viewer
	Status    statusView
	Flash     *flash
	RefreshMS int64
	// LiveURL is what the page's live refresh fetches: the overview's
	// names its chart range, so the chart refreshes in that range.
	LiveURL string
	// Here is the page's own path and query, where its forms come back to.
	Here string
	View any
}

// render writes page name with view, inside the layout with a fresh
// banner. A banner that cannot be read (the database is down) shows as
// unknown rather than failing the page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, code int, name string, view any) {
	data := pageData{
		Title:     titles[name],
		Nav:       navOf[name],
		Viewer:    viewerOf(r.Context()),
		Status:    d.status(r),
		RefreshMS: d.opts.Refresh.Milliseconds(),
		LiveURL:   "/ui/live",
		Here:      r.URL.RequestURI(),
		View:      view,
	}
	if t := d.pages[name]; t != nil && !t.fragment {
		data.Flash = takeFlash(w, r)
	}
	if ov, ok := view.(overviewView); ok {
		var name string
		if ov.Chart != nil {
			name = ov.Chart.Range
		}
		data.LiveURL = withQuery("/ui/live", url.Values{"range": {name}})
	}
	d.renderPage(w, r, code, name, data)
}

// renderPage writes page name with data as it is.
func (d *Dashboard) renderPage(w http.ResponseWriter, _ *http.Request, code int, name string, data pageData) {
	t, ok := d.pages[name]
	if !ok {
		panic("ui: no page template " + name)
	}
	entry := "layout"
	if t.fragment {
		entry = name
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, entry, data); err != nil {
		d.logger.Error("render dashboard page", "page", name, "error", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = buf.WriteTo(w)
}

// titles and navOf name each page in the browser tab and the navigation.
var titles = map[string]string{
	"overview": "Overview", "jobs": "Jobs", "bulk": "Confirm", "job": "Job", "dead_letters": "Dead letters",
	"schedules": "Schedules", "audit": "Audit log", "error": "Error",
	"workflows": "Workflows", "workflow": "Workflow",
}

var navOf = map[string]string{
	"overview": "overview", "jobs": "jobs", "job": "jobs", "bulk": "jobs", "dead_letters": "dead-letters",
	"schedules": "schedules", "audit": "audit", "workflows": "workflows", "workflow": "workflows",
}

// flash is a one-time message a form leaves for the page it redirects to.
type flash struct {
	Kind    string `json:"k"` // "ok" or "error"
	Message string `json:"m"`
}

const (
	flashCookie = "pulse_flash"
	flashMax    = 1500
)

// redirectWithFlash answers a form: 303 to target, carrying msg to the
// next page in a short-lived cookie (Post/Redirect/Get, so a reload does
// not post twice).
func redirectWithFlash(w http.ResponseWriter, r *http.Request, target, kind, msg string) {
	if len(msg) > flashMax { // a cookie holds about 4 KB
		msg = msg[:flashMax] + "…"
	}
	b, _ := json.Marshal(flash{Kind: kind, Message: msg}) //nolint:errchkjson // a flash is two strings
	http.SetCookie(w, &http.Cookie{
		Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString(b),
		Path: "/ui", MaxAge: 60, HttpOnly: true, SameSite: http.SameSiteLaxMode,
	})
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// takeFlash reads the message a form left and clears it.
func takeFlash(w http.ResponseWriter, r *http.Request) *flash {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/ui", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	var f flash
	if err != nil || json.Unmarshal(b, &f) != nil || f.Message == "" {
		return nil
	}
	if f.Kind != "ok" {
		f.Kind = "error"
	}
	return &f
}

// absTime is a time in UTC to the second, the way the JSON API's times
// read.
func absTime(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// relTime is t relative to now in the largest whole unit: "3m ago",
// "in 2h".
func relTime(t *time.Time, now time.Time) string {
	if t == nil {
		return ""
	}
	d := t.Sub(now)
	future := d > 0
	if d < 0 {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// topicsData is the topic table's partial's data: the table, and whether
// the viewer gets the limit forms.
type topicsData struct {
	CanAct bool
	T      *topicsView
}

// shortID is the part of a job id a list shows: its last 8 hex digits.
// A uuid v7 begins with its millisecond timestamp, so jobs submitted in
// the same minute share their first digits; the end is random.
func shortID(id string) string {
	if len(id) <= 8 {
		return id
	}
	return id[len(id)-8:]
}

// statusName is a job status as the API spells it: "DEAD_LETTERED".
func statusName(s pulsev1.JobStatus) string {
	return strings.TrimPrefix(s.String(), "JOB_STATUS_")
}
