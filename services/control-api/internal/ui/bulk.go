package ui

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// BulkService is the part of api.BulkJobs the jobs browser calls.
type BulkService interface {
	CancelJobs(ctx context.Context, req api.BulkRequest) (api.BulkOutcome, error)
	DeleteJobs(ctx context.Context, req api.BulkRequest) (api.BulkOutcome, error)
}

// bulkView is the confirmation page of a bulk action: what it will do
// to how many jobs, and the form that does it.
type bulkView struct {
	Action string // "cancel" or "delete"
	// Verb and Done are the action in words: "Cancel", "canceled".
	Verb   string
	Filter jobFilter
	// Count is how many jobs match now.
	Count int64
	// BackURL is the jobs browser on the same filter.
	BackURL string
	Error   string
	Field   string
}

// bulkAction is the action a /ui/bulk/{action} path names, with its
// service call, or false.
func (d *Dashboard) bulkAction(r *http.Request) (string, func(context.Context, api.BulkRequest) (api.BulkOutcome, error), bool) {
	if d.opts.Bulk == nil {
		return "", nil, false
	}
	switch a := r.PathValue("action"); a {
	case "cancel":
		return a, d.opts.Bulk.CancelJobs, true
	case "delete":
		return a, d.opts.Bulk.DeleteJobs, true
	}
	return "", nil, false
}

// bulkRequestOf is the filter as the service takes it; a status the API
// does not know is refused naming status.
func bulkRequestOf(f jobFilter) (api.BulkRequest, error) {
	req := api.BulkRequest{Topic: f.Topic, Args: []byte(f.Args)}
	if f.Status != "" {
		v, ok := pulsev1.JobStatus_value["JOB_STATUS_"+strings.ToUpper(f.Status)]
		if !ok || v == 0 {
			return req, apierr.Invalid("status", "%q is not one of %s", f.Status, strings.Join(statuses, ", "))
		}
		req.Status = pulsev1.JobStatus(v)
	}
	return req, nil
}

// bulkConfirm is the confirmation step: it counts the jobs the action
// would act on (a dry run) and shows the form that acts, with the count.
// A filter the API refuses is shown naming the field.
func (d *Dashboard) bulkConfirm(w http.ResponseWriter, r *http.Request) error {
	action, run, ok := d.bulkAction(r)
	if !ok {
		return apierr.NotFound("page", r.URL.Path)
	}
	f := jobFilterOf(r)
	f.Order, f.PageToken = "", ""
	view := bulkView{Action: action, Verb: titleCase(action), Filter: f, BackURL: withQuery("/ui/jobs", f.query())}
	req, err := bulkRequestOf(f)
	if err == nil {
		req.DryRun = true
		var out api.BulkOutcome
		if out, err = run(r.Context(), req); err == nil {
			view.Count = out.Matched
			d.render(w, r, http.StatusOK, "bulk", view)
			return nil
		}
	}
	if !isClientError(err) {
		return err
	}
	view.Error, view.Field = err.Error(), apierr.FieldOf(err)
	d.render(w, r, apierr.HTTPStatus(err), "bulk", view)
	return nil
}

// bulkRun acts on the confirmed filter and returns to the jobs browser on
// it, saying how many jobs the action changed — and, when that is not the
// count the operator confirmed or some still match, why.
func (d *Dashboard) bulkRun(w http.ResponseWriter, r *http.Request) error {
	action, run, ok := d.bulkAction(r)
	if !ok {
		return apierr.NotFound("page", r.URL.Path)
	}
	f := jobFilter{
		Topic: strings.TrimSpace(r.PostFormValue("topic")), Status: r.PostFormValue("status"),
		Args: strings.TrimSpace(r.PostFormValue("args")),
	}
	back := withQuery("/ui/jobs", f.query())
	req, err := bulkRequestOf(f)
	var out api.BulkOutcome
	if err == nil {
		out, err = run(r.Context(), req)
	}
	if err != nil {
		if !isClientError(err) {
			return err
		}
		redirectWithFlash(w, r, back, "error", titleCase(action)+": "+err.Error())
		return nil
	}
	done := map[string]string{"cancel": "Canceled", "delete": "Deleted"}[action]
	msg := fmt.Sprintf("%s %d job(s)", done, out.Affected)
	if confirmed, err := strconv.ParseInt(r.PostFormValue("confirmed"), 10, 64); err == nil && confirmed != out.Affected {
		msg += fmt.Sprintf(" (%d matched when you confirmed; jobs changed since)", confirmed)
	}
	if out.StillMatching > 0 {
		msg += fmt.Sprintf("; %d still match (busy at that instant, or submitted since): run it again for them", out.StillMatching)
	}
	redirectWithFlash(w, r, back, "ok", msg)
	return nil
}
