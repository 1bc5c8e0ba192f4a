package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pausewire"
	"github.com/pulsequeue/pulse/pkg/server/telemetry"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// pageSize is how many rows a list page shows.
const pageSize = 50

// bulkRetryMax bounds one bulk retry: a page of dead letters, with room.
const bulkRetryMax = 500

// statuses are the job statuses, in lifecycle order, for the filter.
var statuses = []string{"PENDING", "RUNNING", "RETRYING", "COMPLETED", "DEAD_LETTERED", "CANCELED"}

// jobRow is one job in a list.
type jobRow struct {
	ID          string
	Topic       string
	Status      string
	Priority    int32
	Attempts    int32
	MaxAttempts int32
	Submitted   *time.Time
	Started     *time.Time
	Finished    *time.Time
	NextRun     *time.Time
	// LastError is the latest attempt's error, for the dead-letter view.
	LastError string
	CanCancel bool
	CanRetry  bool
}

func jobRowOf(j *pulsev1.Job) jobRow {
	st := j.GetStatus()
	row := jobRow{
		ID: j.GetId(), Topic: j.GetTopic(), Status: statusName(st), Priority: j.GetPriority(),
		Attempts: j.GetAttempts() - j.GetSnoozes(), MaxAttempts: j.GetMaxAttempts(),
		Submitted: api.TimeFromWire(j.GetSubmittedAt()), Started: api.TimeFromWire(j.GetStartedAt()),
		Finished: api.TimeFromWire(j.GetFinishedAt()), NextRun: api.TimeFromWire(j.GetNextRunAt()),
		// The schema's transitions: a live job may be canceled, a dead or
		// canceled one retried (jobstore/operator.go).
		CanCancel: st == pulsev1.JobStatus_JOB_STATUS_PENDING || st == pulsev1.JobStatus_JOB_STATUS_RETRYING ||
			st == pulsev1.JobStatus_JOB_STATUS_RUNNING,
		CanRetry: st == pulsev1.JobStatus_JOB_STATUS_DEAD_LETTERED || st == pulsev1.JobStatus_JOB_STATUS_CANCELED,
	}
	if errs := j.GetErrors(); len(errs) > 0 {
		row.LastError = errs[len(errs)-1].GetError()
	}
	return row
}

// jobFilter is the jobs browser's query: topic, status, args (a JSON
// object the jobs' args contain), order and page.
type jobFilter struct {
	Topic  string
	Status string
	Args   string
	// Tag keeps the jobs carrying it (index-backed, jobs_tags_idx).
	Tag string
	// Order is "" or "submitted" (newest submitted first) or "finished"
	// (latest finished first).
	Order     string
	PageToken string
}

// jobFilterOf reads the filter from a page's query string.
func jobFilterOf(r *http.Request) jobFilter {
	q := r.URL.Query()
	return jobFilter{
		Topic: strings.TrimSpace(q.Get("topic")), Status: q.Get("status"),
		Args: strings.TrimSpace(q.Get("args")), Order: q.Get("order"), PageToken: q.Get("page_token"),
		Tag: strings.TrimSpace(q.Get("tag")),
	}
}

// query is the filter as a query string for links, without the page.
func (f jobFilter) query() url.Values {
	q := url.Values{}
	if f.Topic != "" {
		q.Set("topic", f.Topic)
	}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	if f.Args != "" {
		q.Set("args", f.Args)
	}
	if f.Tag != "" {
		q.Set("tag", f.Tag)
	}
	if f.Order != "" {
		q.Set("order", f.Order)
	}
	return q
}

// bulkURL is the confirmation page of action on the filter's jobs.
func (f jobFilter) bulkURL(action string) string {
	q := f.query()
	q.Del("order")
	return withQuery("/ui/bulk/"+action, q)
}

type jobListView struct {
	Filter   jobFilter
	Statuses []string
	Jobs     []jobRow
	// CancelURL and DeleteURL lead to the confirmation of a bulk action
	// on every job the filter matches; empty when the filter is empty or
	// its status rules the action out.
	CancelURL string
	DeleteURL string
	// NextURL and FirstURL page through the list; empty when there is no
	// such page.
	NextURL  string
	FirstURL string
	// Window is how many jobs one page of an args search looks at
	// (api.ArgsSearchWindow): a page may hold no match and still go on.
	Window int
	Error  string
	Field  string
}

func (d *Dashboard) jobList(w http.ResponseWriter, r *http.Request) error {
	view, code, err := d.listJobs(r, "/ui/jobs", jobFilterOf(r))
	if err != nil {
		return err
	}
	f := view.Filter
	// The bulk actions filter by topic, status and args only: with a tag
	// set they would act on more than the page shows, so they are not
	// offered.
	if d.opts.Bulk != nil && view.Error == "" && f.Tag == "" && (f.Topic != "" || f.Status != "" || f.Args != "") {
		if f.Status == "" || cancelable[f.Status] {
			view.CancelURL = f.bulkURL("cancel")
		}
		if f.Status == "" || !cancelable[f.Status] {
			view.DeleteURL = f.bulkURL("delete")
		}
	}
	d.render(w, r, code, "jobs", view)
	return nil
}

// cancelable are the statuses a cancel acts on; the others are finished,
// which a delete acts on.
var cancelable = map[string]bool{"PENDING": true, "RETRYING": true, "RUNNING": true}

// listJobs reads one page of jobs for a list page at path. A filter the
// API refuses is shown on the page, naming the field, with no rows.
func (d *Dashboard) listJobs(r *http.Request, path string, f jobFilter) (jobListView, int, error) {
	view := jobListView{Filter: f, Statuses: statuses, Window: api.ArgsSearchWindow}
	order := f.Order
	if order == "submitted" { // the form's name for the API's default
		order = ""
	}
	req := api.JobQuery{Topic: f.Topic, PageToken: f.PageToken, Limit: pageSize, Args: []byte(f.Args), Tag: f.Tag, Order: api.JobOrder(order)}
	if f.Status != "" {
		v, ok := pulsev1.JobStatus_value["JOB_STATUS_"+strings.ToUpper(f.Status)]
		if !ok || v == 0 {
			err := apierr.Invalid("status", "%q is not one of %s", f.Status, strings.Join(statuses, ", "))
			view.Error, view.Field = err.Error(), "status"
			return view, http.StatusBadRequest, nil
		}
		req.Status = pulsev1.JobStatus(v)
	}
	resp, err := d.jobs.SearchJobs(r.Context(), req)
	if err != nil {
		// A search past PULSE_READ_TIMEOUT is shown on the page, saying
		// how to narrow it, like a refused filter.
		if !isClientError(err) && !errors.Is(err, jobstore.ErrStatementTimeout) {
			return view, 0, err
		}
		view.Error, view.Field = err.Error(), apierr.FieldOf(err)
		return view, apierr.HTTPStatus(err), nil
	}
	for _, j := range resp.GetJobs() {
		view.Jobs = append(view.Jobs, jobRowOf(j))
	}
	q := f.query()
	if f.PageToken != "" {
		view.FirstURL = withQuery(path, q)
	}
	if tok := resp.GetNextPageToken(); tok != "" {
		q.Set("page_token", tok)
		view.NextURL = withQuery(path, q)
	}
	return view, http.StatusOK, nil
}

func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// attemptErrorView is one failed attempt.
type attemptErrorView struct {
	Attempt int32
	Error   string
	Worker  string
	At      *time.Time
}

type jobDetailView struct {
	jobRow
	Args   string
	Errors []attemptErrorView
	// AttemptsText says where the job is in its attempt budget, in words
	// that fit its status ("completed on attempt 3 of 25, after 2 failed").
	AttemptsText string
	// WorkerLabel names LockedBy's role: the worker running the job now,
	// or the one that ran its last attempt.
	WorkerLabel string
	LockedBy    string
	LeaseUntil  *time.Time
	// Timeout bounds each attempt; empty when the job has none.
	Timeout string
	// Retry is the job's own backoff in words; empty when it has none.
	Retry          string
	ScheduleID     string
	IdempotencyKey string
	TraceID        string
	TraceURL       string
	// Waiting says why a queued job is not running yet; empty otherwise.
	Waiting string
	// Progress is what the handler last reported (0..100), -1 when it
	// never did; Metadata its metadata object, indented, and Result a
	// completed job's result, indented; empty when none.
	Progress int
	Metadata string
	Result   string
	// Tags are the job's tags, each a link to the jobs carrying it.
	Tags []string
	// WorkflowID is the workflow the job belongs to ("" for none): its
	// page draws the graph.
	WorkflowID string
}

func (d *Dashboard) jobDetail(w http.ResponseWriter, r *http.Request) error {
	resp, err := d.jobs.GetJob(r.Context(), &pulsev1.GetJobRequest{Id: r.PathValue("id")})
	if err != nil {
		return err
	}
	j := resp.GetJob()
	view := jobDetailView{
		jobRow: jobRowOf(j), Args: prettyJSON(j.GetArgs()),
		LockedBy: j.GetLockedBy(), LeaseUntil: api.TimeFromWire(j.GetLeaseUntil()),
		ScheduleID: j.GetScheduleId(), IdempotencyKey: j.GetIdempotencyKey(),
		TraceID:    telemetry.TraceID(j.GetTraceparent()),
		Waiting:    d.waiting(resp.GetWait(), j.GetTopic()),
		Progress:   -1,
		Tags:       j.GetTags(),
		WorkflowID: j.GetWorkflowId(),
	}
	if j.Progress != nil {
		view.Progress = int(j.GetProgress())
	}
	if m := j.GetMetadata(); len(m) > 0 {
		view.Metadata = prettyJSON(m)
	}
	if r := j.GetResult(); len(r) > 0 {
		view.Result = prettyJSON(r)
	}
	if view.TraceID != "" && d.opts.TraceURL != "" {
		view.TraceURL = strings.ReplaceAll(d.opts.TraceURL, "{trace_id}", view.TraceID)
	}
	for _, e := range j.GetErrors() {
		view.Errors = append(view.Errors, attemptErrorView{
			Attempt: e.GetAttempt(), Error: e.GetError(), Worker: e.GetWorker(), At: api.TimeFromWire(e.GetAt()),
		})
	}
	view.AttemptsText, view.WorkerLabel = attemptsText(j), workerLabel(j.GetStatus())
	if t := j.GetTimeout(); t != nil {
		view.Timeout = t.AsDuration().String() + " per attempt"
	}
	view.Retry = retryText(j.GetRetry())
	d.render(w, r, http.StatusOK, "job", view)
	return nil
}

// workerLabel says what locked_by means for a job in status st: the
// worker holding the lease while it runs; otherwise the one that ran its
// last attempt (a finished job ran, in the past tense).
func workerLabel(st pulsev1.JobStatus) string {
	switch st {
	case pulsev1.JobStatus_JOB_STATUS_RUNNING:
		return "Running on"
	case pulsev1.JobStatus_JOB_STATUS_COMPLETED:
		return "Ran on"
	}
	return "Last attempt ran on"
}

// attemptsText puts a job's attempts in words that fit its status. Its
// failures are its error history, which an operator retry keeps while
// starting the count of attempts again.
func attemptsText(j *pulsev1.Job) string {
	// A snoozed claim spent no attempt (ADR-0044): the budget counts the others.
	n, limit, failed := j.GetAttempts()-j.GetSnoozes(), j.GetMaxAttempts(), len(j.GetErrors())
	text := attemptsBudgetText(j.GetStatus(), n, limit, failed)
	if s := j.GetSnoozes(); s == 1 {
		text += "; snoozed once"
	} else if s > 1 {
		text += fmt.Sprintf("; snoozed %d times", s)
	}
	return text
}

func attemptsBudgetText(status pulsev1.JobStatus, n, limit int32, failed int) string {
	plural := func(k int, one, many string) string {
		if k == 1 {
			return one
		}
		return strconv.Itoa(k) + " " + many
	}
	failures := ""
	if failed > 0 {
		failures = ", after " + plural(failed, "1 failed attempt", "failed attempts")
	}
	switch status {
	case pulsev1.JobStatus_JOB_STATUS_COMPLETED:
		if n == 1 && failed == 0 {
			return fmt.Sprintf("Completed on its first attempt (of %d allowed)", limit)
		}
		return fmt.Sprintf("Completed on attempt %d of %d%s", n, limit, failures)
	case pulsev1.JobStatus_JOB_STATUS_RUNNING:
		return fmt.Sprintf("Running attempt %d of %d%s", n, limit, failures)
	case pulsev1.JobStatus_JOB_STATUS_RETRYING:
		return fmt.Sprintf("%d of %d made, %s; attempt %d is next", n, limit, plural(failed, "1 failed", "failed"), n+1)
	case pulsev1.JobStatus_JOB_STATUS_DEAD_LETTERED:
		return fmt.Sprintf("Dead-lettered on attempt %d of %d; %s", n, limit, plural(failed, "1 attempt failed", "attempts failed"))
	case pulsev1.JobStatus_JOB_STATUS_PENDING:
		if n == 0 {
			if failed > 0 {
				return fmt.Sprintf("None yet of %d (retried by an operator%s)", limit, failures)
			}
			return fmt.Sprintf("None yet of %d", limit)
		}
	}
	return fmt.Sprintf("%d of %d made%s", n, limit, failures)
}

// waiting puts GetJob's why-not-running answer in a sentence.
func (d *Dashboard) waiting(wait *pulsev1.JobWait, topic string) string {
	now := d.opts.Now()
	switch wait.GetReason() {
	case pulsev1.JobWaitReason_JOB_WAIT_REASON_PAUSED:
		p := wait.GetPausedBy()
		scope := "all topics"
		if p.GetScope() != "*" {
			scope = "topic " + p.GetScope()
		}
		s := fmt.Sprintf("Dispatch is paused for %s (%s) by %s: %s", scope, pausewire.ModeName(p.GetMode()), p.GetActor(), p.GetReason())
		if u := api.TimeFromWire(p.GetUntil()); u != nil {
			s += fmt.Sprintf("; it resumes by itself at %s (%s)", absTime(u), relTime(u, now))
		}
		return s + "."
	case pulsev1.JobWaitReason_JOB_WAIT_REASON_SCHEDULED:
		t := api.TimeFromWire(wait.GetNotBefore())
		return fmt.Sprintf("Scheduled: it becomes due at %s (%s).", absTime(t), relTime(t, now))
	case pulsev1.JobWaitReason_JOB_WAIT_REASON_RETRY_BACKOFF:
		t := api.TimeFromWire(wait.GetNotBefore())
		return fmt.Sprintf("Waiting out its retry backoff until %s (%s).", absTime(t), relTime(t, now))
	case pulsev1.JobWaitReason_JOB_WAIT_REASON_BREAKER_OPEN:
		t := api.TimeFromWire(wait.GetNotBefore())
		reason := ""
		if p := wait.GetPausedBy(); p != nil {
			reason = " (" + p.GetReason() + ")"
		}
		return fmt.Sprintf("Its topic's circuit breaker is open%s: it lets a trial through at %s (%s).", reason, absTime(t), relTime(t, now))
	case pulsev1.JobWaitReason_JOB_WAIT_REASON_RATE_LIMITED:
		t := api.TimeFromWire(wait.GetNotBefore())
		return fmt.Sprintf("Rate limited: its topic's rate limit has no room for its key until %s (%s).", absTime(t), relTime(t, now))
	case pulsev1.JobWaitReason_JOB_WAIT_REASON_CONCURRENCY_KEY_FULL:
		return fmt.Sprintf("Its concurrency key is at its topic's cap: %d of its jobs are running; it starts when one of them ends, in turn with the topic's other keys.", wait.GetMaxRunningPerKey())
	case pulsev1.JobWaitReason_JOB_WAIT_REASON_SEQUENCE_BLOCKED:
		return "Waiting for job " + wait.GetBlockedBy() + " of its sequence: jobs of one sequence start one at a time, in submit order."
	case pulsev1.JobWaitReason_JOB_WAIT_REASON_SNOOZED:
		t := api.TimeFromWire(wait.GetNotBefore())
		return fmt.Sprintf("Snoozed by its handler until %s (%s); no attempt spent.", absTime(t), relTime(t, now))
	case pulsev1.JobWaitReason_JOB_WAIT_REASON_NO_WORKER:
		t := api.TimeFromWire(wait.GetWorkerLastSeen())
		if t == nil {
			return "Due, but no connected worker serves topic " + topic + ", and none ever has: start a worker that handles " + topic + "."
		}
		return fmt.Sprintf("Due, but no connected worker serves topic %s; one was last connected at %s (%s).", topic, absTime(t), relTime(t, now))
	case pulsev1.JobWaitReason_JOB_WAIT_REASON_QUEUED:
		ahead := strconv.FormatInt(wait.GetAhead(), 10)
		if wait.GetAheadAtLeast() {
			ahead = "at least " + ahead
		}
		if wait.GetAhead() == 0 {
			return "Due and first in line: the next claim of a worker on " + topic + " takes it."
		}
		return fmt.Sprintf("Due, behind %s job(s) of topic %s that the claim takes first (higher priority, or older); it starts when a worker on %s has a free slot.", ahead, topic, topic)
	}
	return ""
}

// prettyJSON indents args for reading; the stored document is valid JSON.
func prettyJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

func (d *Dashboard) cancelJob(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	_, err := d.jobs.CancelJob(r.Context(), &pulsev1.CancelJobRequest{Id: id})
	return d.afterAction(w, r, "/ui/jobs/"+url.PathEscape(id), err, "Canceled job "+id, "Cancel")
}

func (d *Dashboard) retryJob(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	_, err := d.jobs.RetryJob(r.Context(), &pulsev1.RetryJobRequest{Id: id})
	return d.afterAction(w, r, "/ui/jobs/"+url.PathEscape(id), err, "Job "+id+" is queued again", "Retry")
}

// afterAction answers a one-click form: back to the page with what
// happened, or with the API's refusal ("Cancel: job ... is COMPLETED").
// Server faults become the error page.
func (d *Dashboard) afterAction(w http.ResponseWriter, r *http.Request, fallback string, err error, okMsg, action string) error {
	back := backTo(r, fallback)
	if err != nil {
		if !isClientError(err) {
			return err
		}
		redirectWithFlash(w, r, back, "error", action+": "+err.Error())
		return nil
	}
	redirectWithFlash(w, r, back, "ok", okMsg)
	return nil
}

func (d *Dashboard) deadLetters(w http.ResponseWriter, r *http.Request) error {
	// Dead letters list by their time of death unless asked otherwise.
	f := jobFilterOf(r)
	f.Status = "DEAD_LETTERED"
	if !r.URL.Query().Has("order") {
		f.Order = string(api.OrderFinished)
	}
	view, code, err := d.listJobs(r, "/ui/dead-letters", f)
	if err != nil {
		return err
	}
	d.render(w, r, code, "dead_letters", view)
	return nil
}

// retryDeadLetters retries every job ticked on the dead-letter page, one
// RetryJob each, and reports how many went back to PENDING and which did
// not (another operator may have retried one already).
func (d *Dashboard) retryDeadLetters(w http.ResponseWriter, r *http.Request) error {
	back := backTo(r, "/ui/dead-letters")
	if err := r.ParseForm(); err != nil {
		return apierr.Invalid("body", "is not a form: %v", err)
	}
	ids := r.PostForm["id"]
	switch {
	case len(ids) == 0:
		redirectWithFlash(w, r, back, "error", "Retry: no jobs selected; tick the jobs to retry")
		return nil
	case len(ids) > bulkRetryMax:
		redirectWithFlash(w, r, back, "error", fmt.Sprintf("Retry: %d jobs selected; at most %d at a time", len(ids), bulkRetryMax))
		return nil
	}
	var retried int
	var failed []string
	for _, id := range ids {
		if _, err := d.jobs.RetryJob(r.Context(), &pulsev1.RetryJobRequest{Id: id}); err != nil {
			if !isClientError(err) {
				return err
			}
			failed = append(failed, err.Error())
			continue
		}
		retried++
	}
	if len(failed) == 0 {
		redirectWithFlash(w, r, back, "ok", fmt.Sprintf("Retried %d job(s)", retried))
		return nil
	}
	shown := failed[:min(len(failed), 3)]
	more := ""
	if len(failed) > len(shown) {
		more = fmt.Sprintf("; and %d more", len(failed)-len(shown))
	}
	redirectWithFlash(w, r, back, "error", fmt.Sprintf("Retried %d job(s); %d could not be retried: %s%s",
		retried, len(failed), strings.Join(shown, "; "), more))
	return nil
}
