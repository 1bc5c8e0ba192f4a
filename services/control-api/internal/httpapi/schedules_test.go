package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

func setupSchedules(t *testing.T) *testBundle {
	t.Helper()
	b := apitest.New(t, apitest.Options{MaxArgsBytes: maxArgsBytes, MaxBatchJobs: 10})
	mux := http.NewServeMux()
	h := httpapi.New(b.Service, httpapi.Options{MaxArgsBytes: maxArgsBytes})
	h.RegisterSchedules(mux, api.NewSchedules(b.Store, nil, nil))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testBundle{Bundle: b, url: srv.URL}
}

type scheduleOut struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Topic       string     `json:"topic"`
	Kind        string     `json:"kind"`
	Expression  string     `json:"expression"`
	TimeZone    string     `json:"time_zone"`
	Enabled     *bool      `json:"enabled"`
	MaxAttempts int32      `json:"max_attempts"`
	NextRunAt   *time.Time `json:"next_run_at"`
}

func TestScheduleRoutes(t *testing.T) {
	t.Parallel()

	t.Run("Lifecycle", func(t *testing.T) {
		t.Parallel()
		b := setupSchedules(t)
		r := b.do(t, http.MethodPost, "/v1/schedules", `{"name":"nightly","topic":"reports.build","kind":"cron","expression":"0 3 * * *","time_zone":"Europe/Paris","args":{"full":true}}`)
		require.Equal(t, http.StatusCreated, r.status, string(r.body))
		var sc scheduleOut
		r.decode(t, &sc)
		require.Equal(t, "Europe/Paris", sc.TimeZone)
		require.True(t, *sc.Enabled)
		require.Equal(t, int32(25), sc.MaxAttempts)
		require.True(t, sc.NextRunAt.After(time.Now()))
		paris, _ := time.LoadLocation("Europe/Paris")
		require.Equal(t, 3, sc.NextRunAt.In(paris).Hour())

		r = b.do(t, http.MethodGet, "/v1/schedules/"+sc.ID, "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))

		// Changing the expression recomputes the cursor.
		r = b.do(t, http.MethodPut, "/v1/schedules/"+sc.ID, `{"name":"nightly","topic":"reports.build","kind":"every","expression":"10s"}`)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var up scheduleOut
		r.decode(t, &up)
		require.WithinDuration(t, time.Now().Add(10*time.Second), *up.NextRunAt, 3*time.Second)

		r = b.do(t, http.MethodPost, "/v1/schedules/"+sc.ID+"/disable", "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		r.decode(t, &up)
		require.False(t, *up.Enabled)
		r = b.do(t, http.MethodPost, "/v1/schedules/"+sc.ID+"/enable", "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		r.decode(t, &up)
		require.True(t, *up.Enabled)

		// Fire history, paged.
		fired := 0
		for k := range 3 {
			now := time.Now().Add(time.Hour + time.Duration(k)*10*time.Second)
			out, err := b.Store.FireDue(t.Context(), now, 10, func(s *jobstore.Schedule) jobstore.Fire {
				id := s.ID
				next := now.Add(10 * time.Second)
				return jobstore.Fire{Occurrence: *s.NextRunAt, Next: &next, Job: pulsetype.NewJob{
					ID: jobstore.OccurrenceJobID(s.ID, *s.NextRunAt), Topic: s.Topic, Args: s.Args,
					MaxAttempts: s.MaxAttempts, ScheduleID: &id,
				}}
			})
			require.NoError(t, err)
			fired += len(out)
		}
		require.Equal(t, 3, fired)
		var page struct {
			Jobs []struct {
				ID         string `json:"id"`
				ScheduleID string `json:"schedule_id"`
			} `json:"jobs"`
			NextPageToken string `json:"next_page_token"`
		}
		r = b.do(t, http.MethodGet, "/v1/schedules/"+sc.ID+"/jobs?limit=2", "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		r.decode(t, &page)
		require.Len(t, page.Jobs, 2)
		require.Equal(t, sc.ID, page.Jobs[0].ScheduleID)
		require.NotEmpty(t, page.NextPageToken)
		r = b.do(t, http.MethodGet, "/v1/schedules/"+sc.ID+"/jobs?limit=2&page_token="+page.NextPageToken, "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		r.decode(t, &page)
		require.Len(t, page.Jobs, 1)

		r = b.do(t, http.MethodGet, "/v1/schedules", "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var list struct {
			Schedules []scheduleOut `json:"schedules"`
		}
		r.decode(t, &list)
		require.Len(t, list.Schedules, 1)

		r = b.do(t, http.MethodDelete, "/v1/schedules/"+sc.ID, "")
		require.Equal(t, http.StatusNoContent, r.status, string(r.body))
		r = b.do(t, http.MethodGet, "/v1/schedules/"+sc.ID, "")
		require.Equal(t, http.StatusNotFound, r.status, string(r.body))
		// Its jobs stay.
		r = b.do(t, http.MethodGet, "/v1/schedules/"+sc.ID+"/jobs", "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		r.decode(t, &page)
		require.Len(t, page.Jobs, 3)
		require.NotContains(t, string(r.body), `"args"`, "a fired job's args are its schedule's: left out of the history")
	})

	t.Run("BadInputNamesTheField", func(t *testing.T) {
		t.Parallel()
		b := setupSchedules(t)
		r := b.do(t, http.MethodPost, "/v1/schedules", `{"name":"dup","topic":"t","kind":"every","expression":"1m"}`)
		require.Equal(t, http.StatusCreated, r.status, string(r.body))
		for _, tc := range []struct {
			body   string
			status int
			field  string
		}{
			{`{"name":"dup","topic":"t","kind":"every","expression":"1m"}`, http.StatusConflict, "name"},
			{`{"name":"a","topic":"t","kind":"cron","expression":"99 * * * *"}`, http.StatusBadRequest, "expression"},
			{`{"name":"a","topic":"t","kind":"cron","expression":"0 9 * * *","time_zone":"Moon/Base"}`, http.StatusBadRequest, "time_zone"},
			{`{"name":"a","topic":"t","kind":"every","expression":"200ms"}`, http.StatusBadRequest, "expression"},
			{`{"name":"a","topic":"t","kind":"weekly","expression":"x"}`, http.StatusBadRequest, "kind"},
			{`{"name":"","topic":"t","kind":"every","expression":"1m"}`, http.StatusBadRequest, "name"},
			{`{"name":"a","topic":"bad topic","kind":"every","expression":"1m"}`, http.StatusBadRequest, "topic"},
			{`{"name":"a","topic":"t","kind":"every","expression":"1m","args":[1]}`, http.StatusBadRequest, "args"},
			{`{"name":"a","topic":"t","kind":"every","expression":"1m","nope":1}`, http.StatusBadRequest, "nope"},
		} {
			r := b.do(t, http.MethodPost, "/v1/schedules", tc.body)
			require.Equal(t, tc.status, r.status, "%s: %s", tc.body, r.body)
			var e apiError
			r.decode(t, &e)
			require.NotNil(t, e.Error.Field, "%s: %s", tc.body, r.body)
			require.Equal(t, tc.field, *e.Error.Field, "%s: %s", tc.body, r.body)
		}
		r = b.do(t, http.MethodGet, "/v1/schedules/not-a-uuid", "")
		require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
		r = b.do(t, http.MethodGet, fmt.Sprintf("/v1/schedules?limit=%d", api.SchedulesLimitMax+1), "")
		require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	})
}

func TestScheduleRoutesAccessPolicy(t *testing.T) {
	t.Parallel()
	var mounted patterns
	httpapi.New(nil, httpapi.Options{}).RegisterSchedules(&mounted, nil)
	require.Len(t, mounted, 8)
	policy := httpapi.AccessPolicy()
	producer := auth.Identity{Name: "p", Role: auth.RoleProducer}
	operator := auth.Identity{Name: "o", Role: auth.RoleOperator}
	for _, p := range mounted {
		require.Contains(t, policy, p, "decide who may call %s", p)
		require.True(t, operator.Allowed(policy[p]), p)
		require.Equal(t, strings.HasPrefix(p, "GET "), producer.Allowed(policy[p]), "producers read, operators write: %s", p)
	}
}
