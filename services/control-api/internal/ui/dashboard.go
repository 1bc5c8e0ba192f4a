package ui

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/logging"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// formBodyLimit bounds a posted form: a bulk retry of bulkRetryMax ids is
// about 25 KB.
const formBodyLimit = 256 << 10

// RefreshDefault is how often an open page refreshes its banner and drain
// panel.
const RefreshDefault = 2 * time.Second

// JobService is the part of api.ControlService the dashboard calls.
type JobService interface {
	GetJob(ctx context.Context, req *pulsev1.GetJobRequest) (*pulsev1.GetJobResponse, error)
	ListJobs(ctx context.Context, req *pulsev1.ListJobsRequest) (*pulsev1.ListJobsResponse, error)
	// SearchJobs is ListJobs with an args filter and an order: the jobs
	// browser and the dead letters.
	SearchJobs(ctx context.Context, q api.JobQuery) (*pulsev1.ListJobsResponse, error)
	CancelJob(ctx context.Context, req *pulsev1.CancelJobRequest) (*pulsev1.CancelJobResponse, error)
	RetryJob(ctx context.Context, req *pulsev1.RetryJobRequest) (*pulsev1.RetryJobResponse, error)
}

// DispatchService is the part of api.DispatchControl the dashboard calls.
type DispatchService interface {
	GetDispatchState(ctx context.Context, req *pulsev1.GetDispatchStateRequest) (*pulsev1.GetDispatchStateResponse, error)
	Pause(ctx context.Context, req *pulsev1.PauseDispatchRequest, forField string) (*pulsev1.PauseDispatchResponse, error)
	ResumeDispatch(ctx context.Context, req *pulsev1.ResumeDispatchRequest) (*pulsev1.ResumeDispatchResponse, error)
	ListDispatchEvents(ctx context.Context, req *pulsev1.ListDispatchEventsRequest) (*pulsev1.ListDispatchEventsResponse, error)
}

// ScheduleService is the part of api.Schedules the dashboard calls.
type ScheduleService interface {
	ListSchedules(ctx context.Context, req *pulsev1.ListSchedulesRequest) (*pulsev1.ListSchedulesResponse, error)
	EnableSchedule(ctx context.Context, req *pulsev1.EnableScheduleRequest) (*pulsev1.Schedule, error)
	DisableSchedule(ctx context.Context, req *pulsev1.DisableScheduleRequest) (*pulsev1.Schedule, error)
}

// Options configure a Dashboard.
type Options struct {
	// TraceURL links a job to its trace: "{trace_id}" is replaced by the
	// job's 32-hex trace id (Jaeger: http://host:16686/trace/{trace_id}).
	// Empty shows the id without a link.
	TraceURL string
	// Refresh is how often open pages refresh the banner and drain panel;
	// 0 means RefreshDefault.
	Refresh time.Duration
	Logger  *slog.Logger // nil: discard
	// Now is the clock relative times are shown against; nil is time.Now.
	Now func() time.Time

	// Throughput feeds the overview's chart; nil shows none.
	Throughput ThroughputService
	// Topics feeds the overview's per-topic table and its limit form; nil
	// shows none.
	Topics TopicService
	// Bulk cancels and deletes by filter from the jobs browser; nil offers
	// no bulk actions.
	Bulk BulkService
	// Workflows feeds the workflow pages (the list, one workflow's status
	// and graph, its cancel and retry); nil answers them 404.
	Workflows WorkflowService
}

// Dashboard serves the /ui pages.
type Dashboard struct {
	jobs      JobService
	dispatch  DispatchService
	schedules ScheduleService
	opts      Options
	logger    *slog.Logger
	pages     map[string]*pageTemplate
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns the dashboard over the three services. It panics if the
// embedded templates do not parse, which a test catches.
func New(jobs JobService, dispatch DispatchService, schedules ScheduleService, opts Options) *Dashboard {
	if opts.Refresh <= 0 {
		opts.Refresh = RefreshDefault
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Dashboard{
		jobs: jobs, dispatch: dispatch, schedules: schedules,
		opts: opts, logger: logger,
		pages: mustParsePages(opts.Now),
	}
}

// Mux is where routes are mounted: an *http.ServeMux or adminhttp.Server.
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// Register mounts every dashboard route on mux. Posts are refused when
// they come from another origin (http.CrossOriginProtection): a browser
// sends Basic credentials with any form aimed at this host, so without the
// check another site could pause dispatch in an operator's name.
func (d *Dashboard) Register(mux Mux) {
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.Handle("GET /ui/static/{file}", http.StripPrefix("/ui/static/", cacheStatic(http.FileServerFS(static))))

	mux.Handle("GET /ui/{$}", d.page(d.overview))
	mux.Handle("GET /ui/live", d.page(d.live))
	mux.Handle("GET /ui/jobs", d.page(d.jobList))
	mux.Handle("GET /ui/jobs/{id}", d.page(d.jobDetail))
	mux.Handle("GET /ui/dead-letters", d.page(d.deadLetters))
	mux.Handle("GET /ui/schedules", d.page(d.scheduleList))
	mux.Handle("GET /ui/audit", d.page(d.audit))
	mux.Handle("GET /ui/workflows", d.page(d.workflowList))
	mux.Handle("GET /ui/workflows/{id}", d.page(d.workflowDetail))
	mux.Handle("GET /ui/bulk/{action}", d.page(d.bulkConfirm))

	csrf := http.NewCrossOriginProtection()
	post := func(fn func(w http.ResponseWriter, r *http.Request) error) http.Handler {
		return csrf.Handler(d.page(func(w http.ResponseWriter, r *http.Request) error {
			r.Body = http.MaxBytesReader(w, r.Body, formBodyLimit)
			return fn(w, r)
		}))
	}
	mux.Handle("POST /ui/dispatch/pause", post(d.pause))
	mux.Handle("POST /ui/dispatch/resume", post(d.resume))
	mux.Handle("POST /ui/jobs/{id}/cancel", post(d.cancelJob))
	mux.Handle("POST /ui/jobs/{id}/retry", post(d.retryJob))
	mux.Handle("POST /ui/dead-letters/retry", post(d.retryDeadLetters))
	mux.Handle("POST /ui/schedules/{id}/enable", post(d.enableSchedule))
	mux.Handle("POST /ui/schedules/{id}/disable", post(d.disableSchedule))
	mux.Handle("POST /ui/topics/limit", post(d.setTopicLimit))
	mux.Handle("POST /ui/bulk/{action}", post(d.bulkRun))
	mux.Handle("POST /ui/workflows/{id}/cancel", post(d.cancelWorkflow))
	mux.Handle("POST /ui/workflows/{id}/retry", post(d.retryWorkflow))
}

// page adapts a handler that returns its error: the security headers every
// page carries, and an error page for what the handler could not do.
func (d *Dashboard) page(fn func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if err := fn(w, r); err != nil {
			d.renderError(w, r, err)
		}
	})
}

// cacheStatic lets browsers keep the stylesheet and script for a while;
// they change only with a new build.
func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// viewer is who is looking: their name, role and whether the page offers
// them forms.
type viewer struct {
	Name   string
	Role   string
	CanAct bool
}

func viewerOf(ctx context.Context) viewer {
	id := auth.IdentityFrom(ctx)
	return viewer{Name: id.Name, Role: string(id.Role), CanAct: id.Allowed(auth.Require(auth.RoleOperator))}
}

// renderError shows what went wrong on a page of its own, with the status
// the JSON API would answer.
func (d *Dashboard) renderError(w http.ResponseWriter, r *http.Request, err error) {
	code := apierr.HTTPStatus(err)
	msg := err.Error()
	if code >= 500 {
		id := apierr.CorrelationID()
		msg = apierr.PublicMessage(err, id) + "; the control-api log has the details"
		d.logger.Log(r.Context(), slog.LevelError, "dashboard request failed",
			"method", r.Method, "path", r.URL.Path, "status", code, "correlation_id", id, logging.Error, err)
	}
	d.render(w, r, code, "error", errorView{Status: code, StatusText: http.StatusText(code), Message: msg})
}

// WriteAuthError is an auth.ErrorWriter: a dashboard request the
// authentication middleware refuses gets an HTML page saying why (a
// browser shows it when its login prompt is dismissed, or when a producer
// posts a form), with the middleware's status and challenge. It shows no
// dispatch state: the caller has not proven who it is.
func (d *Dashboard) WriteAuthError(w http.ResponseWriter, r *http.Request, code int, err error) bool {
	if r.URL.Path != "/ui" && !strings.HasPrefix(r.URL.Path, "/ui/") {
		return false
	}
	msg := err.Error()
	if code == http.StatusUnauthorized {
		msg = "Sign in with your pulse user name and password (PULSE_AUTH_USERS); reload the page to be asked again."
	}
	d.renderPage(w, r, code, "error", pageData{
		Title:  titles["error"],
		Status: statusView{State: "unknown", Label: "Workers: sign in to see the state"},
		View:   errorView{Status: code, StatusText: http.StatusText(code), Message: msg},
	})
	return true
}

type errorView struct {
	Status     int
	StatusText string
	Message    string
}

// isClientError reports whether err is the caller's to fix (a 4xx), which
// a form shows inline, rather than the server's.
func isClientError(err error) bool {
	code := apierr.HTTPStatus(err)
	return code >= 400 && code < 500 && !errors.Is(err, context.Canceled)
}

// backTo is where a form returns after it acted: the page it names in its
// "back" field when that is a dashboard page, else fallback. Only /ui/
// paths are followed, so a crafted form cannot redirect elsewhere.
func backTo(r *http.Request, fallback string) string {
	back := r.PostFormValue("back")
	if strings.HasPrefix(back, "/ui/") && !strings.HasPrefix(back, "//") && !strings.ContainsAny(back, "\\\r\n") {
		return back
	}
	return fallback
}
