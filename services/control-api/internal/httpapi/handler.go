package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/pkg/server/storable"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// BodySlack is what a single-job body may carry beyond its args limit: the
// other fields and the JSON around them.
const BodySlack = 64 << 10

// BatchBodyMinLimit is the smallest limit on a batch body: generous, since
// a batch carries up to PULSE_MAX_BATCH_JOBS specs, yet bounded, since the
// body is held in memory. It grows to one single-job body when args may be
// larger.
const BatchBodyMinLimit = 64 << 20

// Service is what the transport calls: api.ControlService.
type Service interface {
	Submit(ctx context.Context, prefix string, spec *pulsev1.JobSpec) (*pulsev1.SubmitResult, error)
	SubmitJobs(ctx context.Context, req *pulsev1.SubmitJobsRequest) (*pulsev1.SubmitJobsResponse, error)
	GetJob(ctx context.Context, req *pulsev1.GetJobRequest) (*pulsev1.GetJobResponse, error)
	ListJobs(ctx context.Context, req *pulsev1.ListJobsRequest) (*pulsev1.ListJobsResponse, error)
	CancelJob(ctx context.Context, req *pulsev1.CancelJobRequest) (*pulsev1.CancelJobResponse, error)
	RetryJob(ctx context.Context, req *pulsev1.RetryJobRequest) (*pulsev1.RetryJobResponse, error)
	WaitJob(ctx context.Context, req *pulsev1.WaitJobRequest) (*pulsev1.WaitJobResponse, error)
}

// Options configure a Handler.
type Options struct {
	// MaxArgsBytes is the args limit the service enforces; the body limits
	// derive from it.
	MaxArgsBytes int
	Logger       *slog.Logger
}

// Handler serves the JSON API.
type Handler struct {
	svc         Service
	logger      *slog.Logger
	singleLimit int64
	batchLimit  int64
	// routes holds every pattern mounted so far, so the /v1/ fallback can
	// tell a path no route has (404) from a method its route does not take
	// (405).
	routesMu sync.Mutex
	routes   *http.ServeMux
}

// New returns a Handler calling svc.
func New(svc Service, opts Options) *Handler {
	if opts.MaxArgsBytes <= 0 {
		opts.MaxArgsBytes = pulsetype.DefaultMaxArgsBytes
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	single := SingleLimit(opts.MaxArgsBytes)
	return &Handler{svc: svc, logger: logger, singleLimit: single, batchLimit: BatchLimit(opts.MaxArgsBytes), routes: http.NewServeMux()}
}

// SingleLimit is the largest single-job body accepted when args may be
// maxArgsBytes long.
func SingleLimit(maxArgsBytes int) int64 { return int64(maxArgsBytes) + BodySlack }

// BatchLimit is the largest batch body accepted when args may be
// maxArgsBytes long; gRPC's SubmitJobs takes as much.
func BatchLimit(maxArgsBytes int) int64 { return max(SingleLimit(maxArgsBytes), BatchBodyMinLimit) }

// BatchBodyLimit is the largest batch body accepted, in bytes; gRPC's
// message size limit should match it.
func (h *Handler) BatchBodyLimit() int64 { return h.batchLimit }

// Mux is where routes are mounted: an *http.ServeMux or adminhttp.Server.
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// Register mounts every job route on mux, and the fallback that answers
// any other request under /v1/ in the JSON error format: 404 for a path
// no route has, 405 (with Allow) for a method its route does not take.
func (h *Handler) Register(mux Mux) {
	h.mount(mux, "POST /v1/jobs", h.route(h.submit))
	h.mount(mux, "POST /v1/jobs:batch", h.route(h.submitBatch))
	h.mount(mux, "GET /v1/jobs", h.route(h.list))
	h.mount(mux, "GET /v1/jobs/{id}", h.route(h.get))
	h.mount(mux, "POST /v1/jobs/{id}/cancel", h.route(h.cancel))
	h.mount(mux, "POST /v1/jobs/{id}/retry", h.route(h.retry))
	mux.Handle(FallbackPattern, h.route(h.fallback))
}

// FallbackPattern is the route that answers requests under /v1/ that no
// other route takes.
const FallbackPattern = "/v1/"

// mount mounts a route on mux and remembers its pattern for the fallback.
func (h *Handler) mount(mux Mux, pattern string, handler http.Handler) {
	mux.Handle(pattern, handler)
	h.routesMu.Lock()
	defer h.routesMu.Unlock()
	h.routes.Handle(pattern, http.NotFoundHandler())
}

// fallbackMethods are the methods a /v1/ route may take.
var fallbackMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// fallback answers a request no route took: 405 naming the methods the
// path's routes take, or 404.
func (h *Handler) fallback(w http.ResponseWriter, r *http.Request) error {
	var allowed []string
	h.routesMu.Lock()
	for _, m := range fallbackMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.routes.Handler(probe); pattern != "" {
			allowed = append(allowed, m)
		}
	}
	h.routesMu.Unlock()
	path := r.URL.Path
	if storable.Text("path", path) != nil {
		path = strconv.Quote(path)
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		return &statusError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
			err: fmt.Errorf("%s %s: method not allowed; this route takes %s", r.Method, path, strings.Join(allowed, ", "))}
	}
	return apierr.NotFound("route", r.Method+" "+path)
}

// route adapts a handler that returns its error. A submitted job records
// the trace it belongs to, as over gRPC: the server's HTTP span (adminhttp,
// a child of the caller's W3C traceparent) when there is one, else the
// caller's trace context read from the headers here.
func (h *Handler) route(fn func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if !trace.SpanContextFromContext(ctx).IsValid() {
			ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(r.Header))
		}
		if err := fn(w, r.WithContext(ctx)); err != nil {
			h.writeError(w, r, err)
		}
	})
}

func (h *Handler) submit(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, h.singleLimit, "args",
		fmt.Sprintf("; args may be at most %d bytes", h.singleLimit-BodySlack))
	if err != nil {
		return err
	}
	var in jobSpecJSON
	if err := decodeJobSpec(body, "", &in); err != nil {
		return err
	}
	spec, err := specToWire(&in, "")
	if err != nil {
		return err
	}
	res, err := h.svc.Submit(r.Context(), "", spec)
	if err != nil {
		return err
	}
	code := http.StatusCreated
	if res.GetDuplicate() {
		code = http.StatusOK
	}
	return writeJSON(w, code, submitResultJSON{ID: res.GetId(), Duplicate: res.GetDuplicate(), Replaced: res.GetReplaced()})
}

func (h *Handler) submitBatch(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, h.batchLimit, "body", "; split the batch")
	if err != nil {
		return err
	}
	var in pulsehttp.Batch
	if err := decodeObject(body, "", &in); err != nil {
		return err
	}
	req := &pulsev1.SubmitJobsRequest{Jobs: make([]*pulsev1.JobSpec, len(in.Jobs))}
	for i, raw := range in.Jobs {
		prefix := "jobs[" + strconv.Itoa(i) + "]"
		var js jobSpecJSON
		if err := decodeJobSpec(raw, prefix, &js); err != nil {
			return err
		}
		spec, err := specToWire(&js, prefix)
		if err != nil {
			return err
		}
		req.Jobs[i] = spec
	}
	resp, err := h.svc.SubmitJobs(r.Context(), req)
	if err != nil {
		return err
	}
	out := batchResultJSON{Results: make([]submitResultJSON, len(resp.GetResults()))}
	for i, res := range resp.GetResults() {
		out.Results[i] = submitResultJSON{ID: res.GetId(), Duplicate: res.GetDuplicate(), Replaced: res.GetReplaced()}
	}
	return writeJSON(w, http.StatusCreated, out)
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) error {
	if r.URL.Query().Has("wait") {
		return h.wait(w, r)
	}
	resp, err := h.svc.GetJob(r.Context(), &pulsev1.GetJobRequest{Id: r.PathValue("id")})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, jobWithWaitJSON{Job: jobToJSON(resp.GetJob()), Waiting: waitToJSON(resp.GetWait())})
}

// wait is GET /v1/jobs/{id}?wait=30s: the job once it is finished
// (COMPLETED, DEAD_LETTERED or CANCELED), or as it is when the wait (a Go
// duration, 1ms..5m; empty is 30s) passes. Its status says which.
func (h *Handler) wait(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := onlyParams(q, []string{"wait"}); err != nil {
		return err
	}
	req := &pulsev1.WaitJobRequest{Id: r.PathValue("id")}
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return apierr.Invalid("wait", "%q is not a duration (like 30s or 2m)", s)
		}
		if d < api.MinWaitTimeout || d > api.MaxWaitTimeout {
			return apierr.Invalid("wait", "is %s; it must be between %s and %s", d, api.MinWaitTimeout, api.MaxWaitTimeout)
		}
		req.Timeout = durationpb.New(d)
	}
	resp, err := h.svc.WaitJob(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, jobWithWaitJSON{Job: jobToJSON(resp.GetJob())})
}

// listParams are the query parameters GET /v1/jobs understands.
var listParams = []string{"topic", "status", "tag", "limit", "page_token", "include"}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := onlyParams(q, listParams); err != nil {
		return err
	}
	req := &pulsev1.ListJobsRequest{Topic: q.Get("topic"), PageToken: q.Get("page_token"), Tag: q.Get("tag")}
	switch inc := q.Get("include"); inc {
	case "":
	case "args":
		req.IncludeArgs = true
	default:
		return apierr.Invalid("include", "%q is not something a listing can include; use include=args", inc)
	}
	if s := q.Get("status"); s != "" {
		st, err := parseStatus(s)
		if err != nil {
			return err
		}
		req.Status = st
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return apierr.Invalid("limit", "%q is not a whole number", s)
		}
		if n == 0 {
			// 0 means "default" on the wire; said out loud it is a mistake.
			return apierr.Invalid("limit", "is 0; it must be between 1 and %d", api.ListLimitMax)
		}
		req.Limit = int32(n)
	}
	resp, err := h.svc.ListJobs(r.Context(), req)
	if err != nil {
		return err
	}
	out := listJSON{Jobs: make([]jobJSON, len(resp.GetJobs())), NextPageToken: resp.GetNextPageToken()}
	for i, j := range resp.GetJobs() {
		out.Jobs[i] = jobToJSON(j)
		if !req.GetIncludeArgs() {
			out.Jobs[i].Args = nil // left out, not empty
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) error {
	resp, err := h.svc.CancelJob(r.Context(), &pulsev1.CancelJobRequest{Id: r.PathValue("id")})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, jobToJSON(resp.GetJob()))
}

func (h *Handler) retry(w http.ResponseWriter, r *http.Request) error {
	resp, err := h.svc.RetryJob(r.Context(), &pulsev1.RetryJobRequest{Id: r.PathValue("id")})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, jobToJSON(resp.GetJob()))
}

// readBody reads the whole body up to limit bytes. A larger body is refused
// with 413, naming tooBigField: "args" for a single job, whose args are
// what grows, "body" for a batch.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, tooBigField, hint string) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, &statusError{
			status: http.StatusRequestEntityTooLarge,
			err:    apierr.Invalid(tooBigField, "request body exceeds %d bytes%s", tooBig.Limit, hint),
		}
	}
	if err != nil {
		return nil, apierr.Invalid("body", "could not be read: %v", err)
	}
	return body, nil
}

// onlyParams refuses a query parameter the route does not know, and a
// value Postgres could not store (NUL, invalid UTF-8) in one it does.
func onlyParams(q url.Values, allowed []string) error {
	for name := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || name == a
		}
		if !ok {
			if storable.Text("name", name) != nil {
				name = strconv.Quote(name) // shown, not stored, but kept readable
			}
			return apierr.Invalid(name, "is not a query parameter here; use %s", strings.Join(allowed, ", "))
		}
	}
	for _, name := range allowed {
		for _, v := range q[name] {
			if err := storable.Text(name, v); err != nil {
				return err
			}
		}
	}
	return nil
}

func parseStatus(s string) (pulsev1.JobStatus, error) {
	name := strings.TrimPrefix(strings.ToUpper(s), "JOB_STATUS_")
	if v, ok := pulsev1.JobStatus_value["JOB_STATUS_"+name]; ok && v != 0 {
		return pulsev1.JobStatus(v), nil
	}
	return 0, apierr.Invalid("status", "%q is not one of PENDING, RUNNING, RETRYING, COMPLETED, DEAD_LETTERED, CANCELED", s)
}

// statusError overrides the status apierr.HTTPStatus would pick, for the
// cases HTTP has and gRPC does not: 413, and 405 (with its own code).
type statusError struct {
	status int
	code   string // "": apierr.HTTPCode's
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := apierr.HTTPStatus(err)
	body := errorJSON{Code: apierr.HTTPCode(err), Message: err.Error(), Field: apierr.FieldOf(err)}
	var se *statusError
	if errors.As(err, &se) {
		code = se.status
		if se.code != "" {
			body.Code = se.code
		}
	}
	if code >= 500 && !errors.Is(err, jobstore.ErrStatementTimeout) {
		// The details stay in the log: a server-side failure's text may
		// name the database, its user or host. A statement timeout's text
		// holds none of it and says what to change.
		id := apierr.CorrelationID()
		body.Message = apierr.PublicMessage(err, id)
		h.logger.Log(r.Context(), slog.LevelError, "http request failed",
			"method", r.Method, "path", r.URL.Path, "status", code, "correlation_id", id, logging.Error, err)
	}
	_ = writeJSON(w, code, errorEnvelope{Error: body})
}
