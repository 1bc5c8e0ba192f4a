package ui_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/ui"
)

// The dashboard's handlers over the real service layer and a real
// database, behind the real authentication middleware. The browser tests
// (e2e/dashboard_test.go) drive the same pages in Chromium; these cover
// every page and every refusal without a browser.

const (
	operatorName = "alice"
	producerName = "pat"
)

var (
	operatorAuth = authtest.Basic(operatorName, "op-pass")
	producerAuth = authtest.Basic(producerName, "prod-pass")
)

type testBundle struct {
	*apitest.Bundle
	server   *httptest.Server
	dispatch *api.DispatchControl
	sched    *api.Schedules
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := apitest.New(t, apitest.Options{})
	dispatch := api.NewDispatchControl(b.Store, api.DispatchOptions{})
	sched := api.NewSchedules(b.Store, nil, nil)
	d := ui.New(b.Service, dispatch, sched, ui.Options{
		TraceURL:   "http://traces.example/trace/{trace_id}",
		Throughput: api.NewThroughput(b.Store),
		Topics:     api.NewTopicService(b.Store, nil),
		Bulk:       api.NewBulkJobs(b.Store, api.BulkOptions{Batch: 2}),
	})
	mux := http.NewServeMux()
	d.Register(mux)
	authn, err := auth.New(operatorName+":operator:op-pass,"+producerName+":producer:prod-pass", "")
	require.NoError(t, err)
	srv := httptest.NewServer(auth.Middleware(authn, auth.HTTPPolicy(ui.AccessPolicy()), d.WriteAuthError)(mux))
	t.Cleanup(srv.Close)
	return &testBundle{Bundle: b, server: srv, dispatch: dispatch, sched: sched}
}

// browser is a client that keeps cookies (the flash) and does not follow
// redirects, so a test sees each 303.
type browser struct {
	t      *testing.T
	base   string
	authz  string
	client *http.Client
}

func (tb *testBundle) browser(t *testing.T, authz string) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, base: tb.server.URL, authz: authz, client: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (b *browser) do(method, path string, form url.Values, header http.Header) (int, http.Header, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	require.NoError(b.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if b.authz != "" {
		req.Header.Set("Authorization", b.authz)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := b.client.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return resp.StatusCode, resp.Header, string(out)
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	code, _, body := b.do(http.MethodGet, path, nil, nil)
	return code, body
}

// post submits a form as a same-origin browser would, and returns the
// status and where it redirects.
func (b *browser) post(path string, form url.Values) (int, string, string) {
	b.t.Helper()
	code, h, body := b.do(http.MethodPost, path, form, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	return code, h.Get("Location"), body
}

// insert puts jobs in through the store, with a trace context when given.
func (tb *testBundle) insert(t *testing.T, j pulsetype.NewJob) uuid.UUID {
	t.Helper()
	if j.ID == uuid.Nil {
		j.ID = uuid.Must(uuid.NewV7())
	}
	if j.Args == nil {
		j.Args = []byte(`{"to":"a@example.com","n":1}`)
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = 3
	}
	_, err := tb.Store.Insert(t.Context(), []pulsetype.NewJob{j})
	require.NoError(t, err)
	return j.ID
}

// deadLetter makes a DEAD_LETTERED job the way a worker does: claimed,
// then failed on its one attempt with msg.
func (tb *testBundle) deadLetter(t *testing.T, topic, msg string) uuid.UUID {
	t.Helper()
	id := tb.insert(t, pulsetype.NewJob{Topic: topic, MaxAttempts: 1})
	ctx := t.Context()
	claimed, err := tb.Store.Claim(ctx, []string{topic}, []string{"worker-1"}, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, id, claimed[0].ID)
	_, err = tb.Store.Report(ctx, "worker-1", []pulsetype.Result{{
		Ref: pulsetype.AttemptRef{ID: id, Attempt: 1}, Outcome: pulsetype.OutcomeFail, Error: msg,
	}})
	require.NoError(t, err)
	require.Equal(t, "DEAD_LETTERED", tb.status(t, id))
	return id
}

func (tb *testBundle) status(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var s string
	require.NoError(t, tb.Pool.QueryRow(t.Context(), `SELECT status FROM jobs WHERE id = $1`, id).Scan(&s))
	return s
}

// globalPause is the global scope's row as the database holds it.
func (tb *testBundle) globalPause(t *testing.T) (paused bool, actor, reason string) {
	t.Helper()
	require.NoError(t, tb.Pool.QueryRow(t.Context(),
		`SELECT paused, actor, COALESCE(reason, '') FROM dispatch_control WHERE scope = '*'`).Scan(&paused, &actor, &reason))
	return paused, actor, reason
}

func (tb *testBundle) events(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, tb.Pool.QueryRow(t.Context(), `SELECT count(*) FROM control_events`).Scan(&n))
	return n
}

func TestDashboard(t *testing.T) {
	t.Parallel()

	t.Run("AsksForCredentialsAndServesStaticFilesToAnyone", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		code, h, body := tb.browser(t, "").do(http.MethodGet, "/ui/", nil, nil)
		require.Equal(t, http.StatusUnauthorized, code)
		require.Equal(t, auth.Challenge, h.Get("WWW-Authenticate"))
		require.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"))
		require.Contains(t, body, "Sign in with your pulse user name and password")
		require.Contains(t, body, `data-state="unknown"`, "no state before sign-in")
		require.NotContains(t, body, "data-live-url", "a refused page does not poll")
		code, _, _ = tb.browser(t, authtest.Basic(operatorName, "wrong")).do(http.MethodGet, "/ui/jobs", nil, nil)
		require.Equal(t, http.StatusUnauthorized, code)
		code, _ = tb.browser(t, "").get("/ui/static/pulse.css")
		require.Equal(t, http.StatusOK, code)
		code, h, _ = tb.browser(t, "").do(http.MethodGet, "/ui", nil, nil)
		require.Equal(t, http.StatusMovedPermanently, code)
		require.Equal(t, "/ui/", h.Get("Location"))
	})

	t.Run("ShowsRunningThenPausedWithReasonActorAndExpiry", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		op := tb.browser(t, operatorAuth)
		code, body := op.get("/ui/")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `data-state="running"`)
		require.Contains(t, body, "Workers: Running")
		require.Contains(t, body, `id="pause-form"`)

		code, loc, _ := op.post("/ui/dispatch/pause", url.Values{
			"mode": {"quiesce"}, "reason": {"kernel upgrade"}, "for": {"90m"}, "back": {"/ui/jobs"},
		})
		require.Equal(t, http.StatusSeeOther, code)
		require.Equal(t, "/ui/jobs", loc)
		paused, actor, reason := tb.globalPause(t)
		require.True(t, paused)
		require.Equal(t, operatorName, actor)
		require.Equal(t, "kernel upgrade", reason)

		code, body = op.get("/ui/jobs")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `data-state="quiesce"`)
		require.Contains(t, body, "Workers: Paused (Quiesce)")
		require.Contains(t, body, "“kernel upgrade”")
		require.Contains(t, body, "<b>"+operatorName+"</b>")
		require.Contains(t, body, "until <time")
		require.Contains(t, body, "Paused all topics (quiesce): kernel upgrade; resumes by itself at", "the flash")
		_, body = op.get("/ui/jobs")
		require.NotContains(t, body, `id="flash"`, "a flash shows once")

		// The drain panel: paused with nothing running is safe to upgrade.
		code, body = op.get("/ui/live")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `id="banner"`)
		require.Contains(t, body, `data-safe`)
		require.Contains(t, body, `data-resume="*"`)
		require.NotContains(t, body, "<html", "the live fragment has no layout")

		code, _, _ = op.post("/ui/dispatch/resume", url.Values{"back": {"/ui/"}})
		require.Equal(t, http.StatusSeeOther, code)
		paused, actor, _ = tb.globalPause(t)
		require.False(t, paused)
		require.Equal(t, operatorName, actor)
		_, body = op.get("/ui/")
		require.Contains(t, body, `data-state="running"`)
		require.Contains(t, body, "Resumed all topics")
	})

	t.Run("PausesOneTopicAndShowsItInTheBanner", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		tb.insert(t, pulsetype.NewJob{Topic: "email.send"})
		op := tb.browser(t, operatorAuth)
		code, _, _ := op.post("/ui/dispatch/pause", url.Values{"reason": {"smtp outage"}, "topic": {"email.send"}})
		require.Equal(t, http.StatusSeeOther, code)
		_, body := op.get("/ui/")
		require.Contains(t, body, `data-state="running"`, "the global scope still runs")
		require.Contains(t, body, `data-topic="email.send"`)
		require.Contains(t, body, `data-scope="email.send"`)
		require.Contains(t, body, `data-resume="email.send"`)
	})

	t.Run("RefusesABadPauseFormNamingTheFieldAndPausesNothing", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		op := tb.browser(t, operatorAuth)
		cases := []struct {
			form  url.Values
			field string
			msg   string
		}{
			{url.Values{"reason": {"  "}}, "reason", "reason: is required"},
			{url.Values{"reason": {"x"}, "mode": {"freeze"}}, "mode", "mode: &#34;freeze&#34; is not a pause mode"},
			{url.Values{"reason": {"x"}, "for": {"soon"}}, "for", "for: &#34;soon&#34; is not a duration"},
			{url.Values{"reason": {"x"}, "for": {"-5m"}}, "for", "must be a positive duration"},
			{url.Values{"reason": {"x"}, "topic": {"bad topic!"}}, "topic", "topic"},
		}
		for _, tc := range cases {
			code, _, body := op.post("/ui/dispatch/pause", tc.form)
			require.Equal(t, http.StatusBadRequest, code, tc.form)
			require.Contains(t, body, `data-field="`+tc.field+`"`, tc.form)
			require.Contains(t, body, tc.msg, tc.form)
			require.Contains(t, body, `id="pause-form"`, "the form comes back to be fixed")
		}
		// What was typed is kept.
		_, _, body := op.post("/ui/dispatch/pause", url.Values{"reason": {"db move"}, "for": {"soon"}, "topic": {"email.send"}})
		require.Contains(t, body, `value="db move"`)
		require.Contains(t, body, `value="email.send"`)

		paused, _, _ := tb.globalPause(t)
		require.False(t, paused)
		require.Zero(t, tb.events(t), "nothing reached the audit log")
	})

	t.Run("ShowsAProducerNoControlsAndRefusesItsPosts", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		dead := tb.deadLetter(t, "reports", "boom")
		pending := tb.insert(t, pulsetype.NewJob{Topic: "reports"})
		_, err := tb.dispatch.PauseDispatch(t.Context(), &pulsev1.PauseDispatchRequest{Reason: "upgrade"})
		require.NoError(t, err)
		prod := tb.browser(t, producerAuth)
		for _, path := range []string{"/ui/", "/ui/live", "/ui/jobs/" + dead.String(), "/ui/jobs/" + pending.String(), "/ui/dead-letters", "/ui/schedules", "/ui/audit"} {
			code, body := prod.get(path)
			require.Equal(t, http.StatusOK, code, path)
			require.NotContains(t, body, "<form method=\"post\"", "%s offers a producer a form", path)
			require.NotContains(t, body, `type="checkbox"`, path)
		}
		_, body := prod.get("/ui/")
		require.Contains(t, body, `data-role="producer"`)
		require.Contains(t, body, "Workers: Paused (Drain)", "a producer sees the state")

		posts := map[string]url.Values{
			"/ui/dispatch/pause":                            {"reason": {"sneaky"}},
			"/ui/dispatch/resume":                           {},
			"/ui/jobs/" + pending.String() + "/cancel":      {},
			"/ui/jobs/" + dead.String() + "/retry":          {},
			"/ui/dead-letters/retry":                        {"id": {dead.String()}},
			"/ui/schedules/" + uuid.NewString() + "/enable": {},
		}
		for path, form := range posts {
			code, _, body := prod.post(path, form)
			require.Equal(t, http.StatusForbidden, code, path)
			require.Contains(t, body, "403 Forbidden", "%s: an HTML page", path)
			require.Contains(t, body, "role producer may not call POST "+strings.Split(path, "?")[0], path)
		}
		paused, actor, _ := tb.globalPause(t)
		require.True(t, paused)
		require.Equal(t, "anonymous", actor, "the test paused it directly; the producer changed nothing")
		require.Equal(t, "DEAD_LETTERED", tb.status(t, dead))
		require.Equal(t, "PENDING", tb.status(t, pending))
	})

	t.Run("RefusesAPostFromAnotherSite", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		op := tb.browser(t, operatorAuth)
		code, _, _ := op.do(http.MethodPost, "/ui/dispatch/pause", url.Values{"reason": {"csrf"}},
			http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}})
		require.Equal(t, http.StatusForbidden, code)
		paused, _, _ := tb.globalPause(t)
		require.False(t, paused)
	})

	t.Run("BrowsesJobsByTopicAndStatusAndPages", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		for range 55 {
			tb.insert(t, pulsetype.NewJob{Topic: "a"})
		}
		other := tb.insert(t, pulsetype.NewJob{Topic: "b"})
		op := tb.browser(t, operatorAuth)

		code, body := op.get("/ui/jobs?topic=a&status=PENDING")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, 50, strings.Count(body, `data-job="`))
		require.NotContains(t, body, other.String())
		require.Contains(t, body, `rel="next"`)
		next := nextLink(body)
		require.Contains(t, next, "topic=a")
		code, body = op.get(strings.ReplaceAll(next, "&amp;", "&"))
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, 5, strings.Count(body, `data-job="`))
		require.NotContains(t, body, `rel="next"`)
		require.Contains(t, body, "« First page")

		code, body = op.get("/ui/jobs?status=COMPLETED")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "No jobs match.")

		code, body = op.get("/ui/jobs?status=DONE")
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, body, `data-field="status"`)
		require.Contains(t, body, "&#34;DONE&#34; is not one of PENDING, RUNNING")
	})

	t.Run("ShowsAJobsArgsErrorsTraceAndWhyItWaits", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		waiting := tb.insert(t, pulsetype.NewJob{Topic: "img", TraceParent: "00-" + traceID + "-00f067aa0ba902b7-01"})
		op := tb.browser(t, operatorAuth)

		code, body := op.get("/ui/jobs/" + waiting.String())
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `href="http://traces.example/trace/`+traceID+`"`)
		require.Contains(t, body, "&#34;to&#34;: &#34;a@example.com&#34;", "args, indented")
		require.Contains(t, body, "Due, but no connected worker serves topic img, and none ever has")
		_, err := tb.Store.OpenPresence(t.Context(), "gw-test", jobstore.Presence{WorkerID: "w1", Principal: "anonymous", Topics: []string{"img"}}, time.Minute)
		require.NoError(t, err)
		_, body = op.get("/ui/jobs/" + waiting.String())
		require.Contains(t, body, "Due and first in line")
		require.Contains(t, body, `id="cancel-button"`)
		require.NotContains(t, body, `id="retry-button"`)

		_, err = tb.dispatch.PauseDispatch(t.Context(), &pulsev1.PauseDispatchRequest{Reason: "maintenance", Topic: "img"})
		require.NoError(t, err)
		_, body = op.get("/ui/jobs/" + waiting.String())
		require.Contains(t, body, "Dispatch is paused for topic img (drain) by anonymous: maintenance.")

		dead := tb.deadLetter(t, "pdf", "render failed: font missing")
		_, body = op.get("/ui/jobs/" + dead.String())
		require.Contains(t, body, `id="errors"`)
		require.Contains(t, body, "render failed: font missing")
		require.Contains(t, body, "<code>worker-1</code>")
		require.Contains(t, body, `id="retry-button"`)
		require.NotContains(t, body, `id="waiting"`, "a finished job waits for nothing")
		require.Contains(t, body, `<dd id="trace">—</dd>`, "no trace context, no link")

		code, body = op.get("/ui/jobs/not-a-uuid")
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, body, `id="error-message"`)
		code, body = op.get("/ui/jobs/" + uuid.NewString())
		require.Equal(t, http.StatusNotFound, code)
		require.Contains(t, body, "404 Not Found")
	})

	t.Run("CancelsAndRetriesAJob", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		id := tb.insert(t, pulsetype.NewJob{Topic: "img"})
		op := tb.browser(t, operatorAuth)
		page := "/ui/jobs/" + id.String()

		code, loc, _ := op.post(page+"/cancel", url.Values{"back": {page}})
		require.Equal(t, http.StatusSeeOther, code)
		require.Equal(t, page, loc)
		require.Equal(t, "CANCELED", tb.status(t, id))
		_, body := op.get(page)
		require.Contains(t, body, "Canceled job "+id.String())
		require.Contains(t, body, `id="retry-button"`)

		// Canceling again is refused by the schema's rules, shown as a flash.
		code, _, _ = op.post(page+"/cancel", url.Values{"back": {page}})
		require.Equal(t, http.StatusSeeOther, code)
		_, body = op.get(page)
		require.Contains(t, body, `flash-error`)
		require.Contains(t, body, "Cancel: ")

		code, _, _ = op.post(page+"/retry", url.Values{"back": {page}})
		require.Equal(t, http.StatusSeeOther, code)
		require.Equal(t, "PENDING", tb.status(t, id))

		// back may only lead to a dashboard page.
		_, loc, _ = op.post(page+"/cancel", url.Values{"back": {"https://evil.example/"}})
		require.Equal(t, page, loc)
	})

	t.Run("RetriesSelectedDeadLettersInBulk", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		a, b, c := tb.deadLetter(t, "etl", "e1"), tb.deadLetter(t, "etl", "e2"), tb.deadLetter(t, "etl", "e3")
		op := tb.browser(t, operatorAuth)
		code, body := op.get("/ui/dead-letters?topic=etl")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, 3, strings.Count(body, `name="id"`))
		require.Contains(t, body, "e3", "the last error shows")

		code, loc, _ := op.post("/ui/dead-letters/retry", url.Values{
			"id": {a.String(), b.String(), "not-a-uuid"}, "back": {"/ui/dead-letters?topic=etl"},
		})
		require.Equal(t, http.StatusSeeOther, code)
		require.Equal(t, "/ui/dead-letters?topic=etl", loc)
		require.Equal(t, "PENDING", tb.status(t, a))
		require.Equal(t, "PENDING", tb.status(t, b))
		require.Equal(t, "DEAD_LETTERED", tb.status(t, c))
		_, body = op.get(loc)
		require.Contains(t, body, "Retried 2 job(s); 1 could not be retried: id")
		require.Equal(t, 1, strings.Count(body, `name="id"`))

		_, _, _ = op.post("/ui/dead-letters/retry", url.Values{})
		_, body = op.get("/ui/dead-letters")
		require.Contains(t, body, "no jobs selected")
	})

	t.Run("ListsSchedulesWithNextFireAndTogglesThem", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		sc, err := tb.sched.CreateSchedule(t.Context(), &pulsev1.CreateScheduleRequest{Definition: &pulsev1.ScheduleDefinition{
			Name: "nightly-report", Topic: "reports", Kind: "cron", Expression: "0 3 * * *", TimeZone: "Europe/Berlin",
		}})
		require.NoError(t, err)
		op := tb.browser(t, operatorAuth)
		code, body := op.get("/ui/schedules")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `data-schedule="nightly-report"`)
		require.Contains(t, body, "<code>0 3 * * *</code> <small>(Europe/Berlin)</small>")
		require.Contains(t, body, `<time datetime="`+sc.GetNextRunAt().AsTime().UTC().Format(time.RFC3339)+`"`)
		require.Contains(t, body, `data-disable="nightly-report"`)

		code, _, _ = op.post("/ui/schedules/"+sc.GetId()+"/disable", url.Values{"back": {"/ui/schedules"}})
		require.Equal(t, http.StatusSeeOther, code)
		_, body = op.get("/ui/schedules")
		require.Contains(t, body, "Disabled schedule nightly-report")
		require.Contains(t, body, `data-enable="nightly-report"`)
		got, err := tb.sched.GetSchedule(t.Context(), &pulsev1.GetScheduleRequest{Id: sc.GetId()})
		require.NoError(t, err)
		require.False(t, got.GetEnabled())

		code, _, _ = op.post("/ui/schedules/"+sc.GetId()+"/enable", url.Values{})
		require.Equal(t, http.StatusSeeOther, code)
		got, err = tb.sched.GetSchedule(t.Context(), &pulsev1.GetScheduleRequest{Id: sc.GetId()})
		require.NoError(t, err)
		require.True(t, got.GetEnabled())
	})

	t.Run("ShowsTheAuditLogNewestFirst", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		op := tb.browser(t, operatorAuth)
		_, _, _ = op.post("/ui/dispatch/pause", url.Values{"reason": {"first pause"}})
		_, _, _ = op.post("/ui/dispatch/resume", url.Values{})
		code, body := op.get("/ui/audit")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, 2, strings.Count(body, `data-event="`))
		resume, pause := strings.Index(body, ">resume<"), strings.Index(body, ">pause<")
		require.True(t, resume > 0 && pause > resume, "newest first")
		require.Contains(t, body, "first pause")
		require.Equal(t, 2, strings.Count(body, "<b>"+operatorName+"</b>"))
	})
}

func TestAccessPolicyNamesEveryRoute(t *testing.T) {
	t.Parallel()
	var mounted patterns
	ui.New(nil, nil, nil, ui.Options{}).Register(&mounted)
	policy := ui.AccessPolicy()
	require.Len(t, policy, len(mounted))
	for _, p := range mounted {
		require.Contains(t, policy, p, "decide who may call %s", p)
		if strings.HasPrefix(p, "POST ") {
			require.Equal(t, auth.Require(auth.RoleOperator), policy[p], "%s changes state: operators only", p)
		}
	}
}

type patterns []string

func (p *patterns) Handle(pattern string, _ http.Handler) { *p = append(*p, pattern) }

// nextLink is the href of a page's "Next page" link.
func nextLink(body string) string {
	end := strings.Index(body, `" rel="next"`)
	if end < 0 {
		return ""
	}
	return body[strings.LastIndex(body[:end], `href="`)+len(`href="`) : end]
}
