package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

// setupDispatch serves the JSON API with the dispatch routes; every
// request runs as the identity named in its X-Test-Actor header, as the
// auth middleware would attach it.
func setupDispatch(t *testing.T) *testBundle {
	t.Helper()
	b := apitest.New(t, apitest.Options{MaxArgsBytes: maxArgsBytes, MaxBatchJobs: 10})
	mux := http.NewServeMux()
	h := httpapi.New(b.Service, httpapi.Options{MaxArgsBytes: maxArgsBytes})
	h.Register(mux)
	h.RegisterDispatch(mux, api.NewDispatchControl(b.Store, api.DispatchOptions{}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := r.Header.Get("X-Test-Actor"); name != "" {
			r = r.WithContext(auth.WithIdentity(r.Context(), auth.Identity{Name: name, Role: auth.RoleOperator}))
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &testBundle{Bundle: b, url: srv.URL}
}

type scope struct {
	Scope    string     `json:"scope"`
	Paused   bool       `json:"paused"`
	Mode     string     `json:"mode"`
	Reason   string     `json:"reason"`
	Actor    string     `json:"actor"`
	PausedAt *time.Time `json:"paused_at"`
	Until    *time.Time `json:"until"`
	Version  int64      `json:"version"`
	Queued   int64      `json:"queued"`
	Running  int64      `json:"running"`
	Drained  bool       `json:"drained"`
}

type controlResult struct {
	Changed bool  `json:"changed"`
	State   scope `json:"state"`
}

type dispatchState struct {
	Version int64   `json:"version"`
	Paused  bool    `json:"paused"`
	Scopes  []scope `json:"scopes"`
}

type event struct {
	ID     int64      `json:"id"`
	Scope  string     `json:"scope"`
	Action string     `json:"action"`
	Mode   string     `json:"mode"`
	Reason string     `json:"reason"`
	Actor  string     `json:"actor"`
	Until  *time.Time `json:"until"`
}

type eventsPage struct {
	Events        []event `json:"events"`
	NextPageToken string  `json:"next_page_token"`
}

func (b *testBundle) control(t *testing.T, path, body, actor string) controlResult {
	t.Helper()
	r := b.do(t, http.MethodPost, path, body, "X-Test-Actor", actor)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var out controlResult
	r.decode(t, &out)
	return out
}

func (b *testBundle) dispatchState(t *testing.T) dispatchState {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/dispatch", "")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var out dispatchState
	r.decode(t, &out)
	return out
}

func TestDispatchRoutes(t *testing.T) {
	t.Parallel()

	t.Run("PauseResumeIdempotencyAndAuditWithTheActor", func(t *testing.T) {
		t.Parallel()
		b := setupDispatch(t)
		p := b.control(t, "/v1/dispatch/pause", `{"reason":"db upgrade"}`, "alice")
		require.True(t, p.Changed)
		require.Equal(t, scope{Scope: "*", Paused: true, Mode: "drain", Reason: "db upgrade", Actor: "alice",
			PausedAt: p.State.PausedAt, Version: p.State.Version}, p.State)

		again := b.control(t, "/v1/dispatch/pause", `{"reason":"db upgrade","mode":"drain"}`, "bob")
		require.False(t, again.Changed)
		require.Equal(t, p.State.Version, again.State.Version)

		q := b.control(t, "/v1/dispatch/pause", `{"reason":"db upgrade","mode":"quiesce"}`, "bob")
		require.True(t, q.Changed)
		require.Equal(t, "quiesce", q.State.Mode)

		r := b.control(t, "/v1/dispatch/resume", ``, "carol")
		require.True(t, r.Changed)
		require.False(t, r.State.Paused)
		require.Empty(t, r.State.Reason)
		require.Equal(t, p.State.PausedAt.UTC(), r.State.PausedAt.UTC(), "resume keeps paused_at")
		require.False(t, b.control(t, "/v1/dispatch/resume", `{}`, "carol").Changed)

		resp := b.do(t, http.MethodGet, "/v1/dispatch/events", "")
		require.Equal(t, http.StatusOK, resp.status, string(resp.body))
		var page eventsPage
		resp.decode(t, &page)
		var got []string
		for _, e := range page.Events {
			got = append(got, fmt.Sprintf("%s %s %s %s %q", e.Scope, e.Action, e.Mode, e.Actor, e.Reason))
		}
		require.Equal(t, []string{
			`* resume quiesce carol ""`,
			`* pause quiesce bob "db upgrade"`,
			`* pause drain alice "db upgrade"`,
		}, got)
		require.Empty(t, page.NextPageToken)
	})

	t.Run("StatusCountsEveryScopeAndSaysWhenItIsDrained", func(t *testing.T) {
		t.Parallel()
		b := setupDispatch(t)
		ctx := t.Context()
		_, err := b.Store.Insert(ctx, []pulsetype.NewJob{newJobSpec("mail"), newJobSpec("mail"), newJobSpec("sms")})
		require.NoError(t, err)
		_, err = b.Store.Claim(ctx, []string{"sms"}, []string{"w"}, time.Minute)
		require.NoError(t, err)
		b.control(t, "/v1/dispatch/pause", `{"reason":"smtp down","topic":"mail","for":"1h"}`, "alice")
		b.control(t, "/v1/dispatch/pause", `{"reason":"sms vendor","topic":"sms"}`, "alice")

		st := b.dispatchState(t)
		require.False(t, st.Paused)
		require.Len(t, st.Scopes, 3)
		byScope := map[string]scope{}
		for _, s := range st.Scopes {
			byScope[s.Scope] = s
		}
		require.Equal(t, "*", st.Scopes[0].Scope, "global first")
		require.EqualValues(t, 2, byScope["*"].Queued)
		require.EqualValues(t, 1, byScope["*"].Running)
		require.False(t, byScope["*"].Drained)
		require.True(t, byScope["mail"].Paused)
		require.EqualValues(t, 2, byScope["mail"].Queued)
		require.True(t, byScope["mail"].Drained)
		require.NotNil(t, byScope["mail"].Until)
		require.WithinDuration(t, time.Now().Add(time.Hour), *byScope["mail"].Until, time.Minute)
		require.EqualValues(t, 1, byScope["sms"].Running)
		require.False(t, byScope["sms"].Drained)
	})

	t.Run("BadInputIsRefusedNamingTheFieldAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupDispatch(t)
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		cases := []struct {
			body, field string
		}{
			{`{}`, "reason"},
			{``, "reason"},
			{`{"reason":"   "}`, "reason"},
			{`{"reason":"` + strings.Repeat("é", 501) + `"}`, "reason"},
			{`{"reason":"x","mode":"freeze"}`, "mode"},
			{`{"reason":"x","topic":"bad topic!"}`, "topic"},
			{`{"reason":"x","topic":"*"}`, "topic"},
			{`{"reason":"x","for":"soon"}`, "for"},
			{`{"reason":"x","for":"-5m"}`, "for"},
			{`{"reason":"x","until":"tomorrow"}`, "until"},
			{`{"reason":"x","until":"` + past + `"}`, "until"},
			{`{"reason":"x","for":"1h","until":"` + future + `"}`, "for"},
			{`{"reason":"x","colour":"red"}`, "colour"},
			{`{"reason":5}`, "reason"},
		}
		for _, tc := range cases {
			r := b.do(t, http.MethodPost, "/v1/dispatch/pause", tc.body)
			require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", tc.body, r.body)
			var e apiError
			r.decode(t, &e)
			require.Equal(t, "invalid_argument", e.Error.Code, tc.body)
			require.NotNil(t, e.Error.Field, tc.body)
			require.Equal(t, tc.field, *e.Error.Field, "%s: %s", tc.body, e.Error.Message)
		}
		for _, tc := range []struct{ path, field string }{
			{"/v1/dispatch/events?limit=0", "limit"},
			{"/v1/dispatch/events?limit=501", "limit"},
			{"/v1/dispatch/events?page_token=nope", "page_token"},
			{"/v1/dispatch/events?colour=red", "colour"},
		} {
			r := b.do(t, http.MethodGet, tc.path, "")
			require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", tc.path, r.body)
			var e apiError
			r.decode(t, &e)
			require.Equal(t, tc.field, *e.Error.Field, tc.path)
		}
		r := b.do(t, http.MethodPost, "/v1/dispatch/resume", `{"topic":"bad topic!"}`)
		require.Equal(t, http.StatusBadRequest, r.status)

		st := b.dispatchState(t)
		require.Len(t, st.Scopes, 1)
		require.False(t, st.Paused)
		var page eventsPage
		b.do(t, http.MethodGet, "/v1/dispatch/events", "").decode(t, &page)
		require.Empty(t, page.Events, "nothing half-written")
	})

	t.Run("GetJobSaysWhyAJobIsNotRunning", func(t *testing.T) {
		t.Parallel()
		b := setupDispatch(t)
		ins, err := b.Store.Insert(t.Context(), []pulsetype.NewJob{newJobSpec("mail"), newJobSpec("mail")})
		require.NoError(t, err)
		b.control(t, "/v1/dispatch/pause", `{"reason":"smtp down","topic":"mail","for":"1h"}`, "alice")
		type waiting struct {
			Waiting *struct {
				Reason   string `json:"reason"`
				PausedBy *scope `json:"paused_by"`
				Ahead    int64  `json:"ahead"`
			} `json:"waiting"`
		}
		var got waiting
		r := b.do(t, http.MethodGet, "/v1/jobs/"+ins[1].ID.String(), "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		r.decode(t, &got)
		require.Equal(t, "paused", got.Waiting.Reason)
		require.Equal(t, "mail", got.Waiting.PausedBy.Scope)
		require.Equal(t, "alice", got.Waiting.PausedBy.Actor)
		require.Equal(t, "smtp down", got.Waiting.PausedBy.Reason)
		require.NotNil(t, got.Waiting.PausedBy.PausedAt)
		require.NotNil(t, got.Waiting.PausedBy.Until)

		b.control(t, "/v1/dispatch/resume", `{"topic":"mail"}`, "alice")
		r = b.do(t, http.MethodGet, "/v1/jobs/"+ins[1].ID.String(), "")
		require.Contains(t, string(r.body), `"reason":"no_worker"`)
		require.Contains(t, string(r.body), `"worker_last_seen":null`, "no worker ever served mail")

		at, err := b.Store.OpenPresence(t.Context(), "gw-test", jobstore.Presence{WorkerID: "w1", Principal: "anonymous", Topics: []string{"mail"}}, time.Minute)
		require.NoError(t, err)
		got = waiting{}
		r = b.do(t, http.MethodGet, "/v1/jobs/"+ins[1].ID.String(), "")
		require.NotContains(t, string(r.body), "worker_last_seen", "only no_worker carries it")
		r.decode(t, &got)
		require.Equal(t, "queued", got.Waiting.Reason)
		require.EqualValues(t, 1, got.Waiting.Ahead, "the earlier job of the same priority goes first")
		require.Nil(t, got.Waiting.PausedBy)

		require.NoError(t, b.Store.LeavePresence(t.Context(), []jobstore.Left{{WorkerID: "w1", ConnectedAt: at}}))
		var left struct {
			Waiting struct {
				Reason         string     `json:"reason"`
				WorkerLastSeen *time.Time `json:"worker_last_seen"`
			} `json:"waiting"`
		}
		b.do(t, http.MethodGet, "/v1/jobs/"+ins[1].ID.String(), "").decode(t, &left)
		require.Equal(t, "no_worker", left.Waiting.Reason)
		require.NotNil(t, left.Waiting.WorkerLastSeen)
		require.WithinDuration(t, time.Now(), *left.Waiting.WorkerLastSeen, time.Minute)
	})

	t.Run("EventsPageNewestFirst", func(t *testing.T) {
		t.Parallel()
		b := setupDispatch(t)
		for i := range 5 {
			b.control(t, "/v1/dispatch/pause", fmt.Sprintf(`{"reason":"r%d"}`, i), "alice")
		}
		var reasons []string
		token := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 5)
			var page eventsPage
			r := b.do(t, http.MethodGet, "/v1/dispatch/events?limit=2&page_token="+token, "")
			require.Equal(t, http.StatusOK, r.status, string(r.body))
			r.decode(t, &page)
			for _, e := range page.Events {
				reasons = append(reasons, e.Reason)
			}
			if token = page.NextPageToken; token == "" {
				break
			}
		}
		require.Equal(t, []string{"r4", "r3", "r2", "r1", "r0"}, reasons)
	})
}

func newJobSpec(topic string) pulsetype.NewJob {
	return pulsetype.NewJob{ID: uuid.Must(uuid.NewV7()), Topic: topic, Args: []byte(`{}`), Priority: 5, MaxAttempts: 3}
}
