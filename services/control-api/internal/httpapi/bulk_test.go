package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

var (
	bulkOperator = authtest.Basic("op", "op-pass")
	bulkProducer = authtest.Basic("prod", "prod-pass")
)

// setupBulk serves the JSON API with the bulk routes behind the real
// authentication middleware and cross-origin protection, as app wires
// them; batches are of two jobs, so every action takes several.
func setupBulk(t *testing.T) *testBundle {
	t.Helper()
	b := apitest.New(t, apitest.Options{MaxArgsBytes: maxArgsBytes, MaxBatchJobs: 10})
	mux := http.NewServeMux()
	h := httpapi.New(b.Service, httpapi.Options{MaxArgsBytes: maxArgsBytes})
	h.Register(mux)
	h.RegisterBulk(mux, api.NewBulkJobs(b.Store, api.BulkOptions{Batch: 2}))
	authn, err := auth.New("op:operator:op-pass,prod:producer:prod-pass", "")
	require.NoError(t, err)
	handler := auth.CrossOrigin()(auth.Middleware(authn, auth.HTTPPolicy(httpapi.AccessPolicy()))(mux))
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &testBundle{Bundle: b, url: srv.URL}
}

type bulkResult struct {
	DryRun        bool  `json:"dry_run"`
	Matched       int64 `json:"matched"`
	Affected      int64 `json:"affected"`
	Batches       int   `json:"batches"`
	StillMatching int64 `json:"still_matching"`
}

func (b *testBundle) jobs(t *testing.T, topic, args string, status pulsetype.Status, n int) []uuid.UUID { //nolint:unparam // the ids are there for tests that need them
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		spec := jobstoretest.Spec{Topic: topic, Args: args, Status: status}
		if status == pulsetype.StatusDeadLettered {
			spec.MaxAttempts = 1
		}
		ids[i] = jobstoretest.MustCreate(t, b.Pool, spec)
	}
	return ids
}

func (b *testBundle) countWhere(t *testing.T, where string) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE `+where).Scan(&n))
	return n
}

func TestBulkRoutes(t *testing.T) {
	t.Parallel()

	t.Run("CountsThenCancelsEveryMatchingJob", func(t *testing.T) {
		t.Parallel()
		b := setupBulk(t)
		b.jobs(t, "mail", `{"customer": "acme", "n": 1}`, pulsetype.StatusPending, 5)
		b.jobs(t, "mail", `{"customer": "globex"}`, pulsetype.StatusPending, 2)
		b.jobs(t, "mail", `{"customer": "acme"}`, pulsetype.StatusCompleted, 1)
		body := `{"topic": "mail", "args": {"customer": "acme"}, "dry_run": true}`

		r := b.do(t, "POST", "/v1/jobs/cancel", body, "Authorization", bulkOperator)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var dry bulkResult
		r.decode(t, &dry)
		require.Equal(t, bulkResult{DryRun: true, Matched: 5}, dry)
		require.Equal(t, 7, b.countWhere(t, `status = 'PENDING'`), "a dry run changes nothing")

		r = b.do(t, "POST", "/v1/jobs/cancel", strings.Replace(body, "true", "false", 1), "Authorization", bulkOperator)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var done bulkResult
		r.decode(t, &done)
		require.Equal(t, bulkResult{Affected: 5, Batches: 4}, done)
		require.Equal(t, 5, b.countWhere(t, `status = 'CANCELED' AND args @> '{"customer": "acme"}'`))
		require.Equal(t, 2, b.countWhere(t, `status = 'PENDING'`))
	})

	t.Run("DeletesFinishedJobsAndRefusesALiveStatus", func(t *testing.T) {
		t.Parallel()
		b := setupBulk(t)
		b.jobs(t, "etl", `{}`, pulsetype.StatusCompleted, 3)
		b.jobs(t, "etl", `{}`, pulsetype.StatusDeadLettered, 1)
		b.jobs(t, "etl", `{}`, pulsetype.StatusPending, 2)

		r := b.do(t, "POST", "/v1/jobs/delete", `{"topic": "etl", "status": "pending"}`, "Authorization", bulkOperator)
		require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
		var e apiError
		r.decode(t, &e)
		require.Equal(t, "status", *e.Error.Field)
		require.Contains(t, e.Error.Message, "delete acts only on finished jobs")

		r = b.do(t, "POST", "/v1/jobs/delete", `{"topic": "etl"}`, "Authorization", bulkOperator)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var done bulkResult
		r.decode(t, &done)
		require.EqualValues(t, 4, done.Affected)
		require.Equal(t, 2, b.CountJobs(t), "the live jobs stay")
	})

	t.Run("RefusesABadFilterNamingTheFieldAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupBulk(t)
		b.jobs(t, "mail", `{"customer": "acme"}`, pulsetype.StatusPending, 2)
		huge := `{"k": "` + strings.Repeat("x", 100<<10) + `"}`
		cases := []struct {
			body, field, msg string
			status           int
		}{
			{`{}`, "filter", "is empty", 400},
			{`{"dry_run": true}`, "filter", "is empty", 400},
			{`{"args": null}`, "filter", "is empty", 400},
			{`{"args": [1, 2]}`, "args", "must be a JSON object", 400},
			{`{"args": "acme"}`, "args", "must be a JSON object", 400},
			{`{"args": 7}`, "args", "must be a JSON object", 400},
			{`{"args": {"a": "\u0000"}}`, "args", "NUL", 400},
			{"{\"args\": {\"a\": \"\xff\"}}", "args", "UTF-8", 400},
			{`{"args": {"a": "\ud800"}}`, "args", "surrogate", 400},
			{`{"topic": "mail\u0000"}`, "topic", "NUL", 400},
			{`{"topic": "bad topic"}`, "topic", "characters outside", 400},
			{`{"topic": "mail", "status": "DONE"}`, "status", "is not one of", 400},
			{`{"topic": "mail", "limit": 5}`, "limit", "is not a known field", 400},
			{`{"topic": "mail"} {}`, "body", "data after the JSON object", 400},
			{`[]`, "body", "must be a JSON object", 400},
			{`{"topic": "mail", "args": ` + huge + `}`, "body", "exceeds", http.StatusRequestEntityTooLarge},
		}
		for _, path := range []string{"/v1/jobs/cancel", "/v1/jobs/delete"} {
			for _, tc := range cases {
				r := b.do(t, "POST", path, tc.body, "Authorization", bulkOperator)
				require.Equal(t, tc.status, r.status, "%s %.60q: %s", path, tc.body, r.body)
				var e apiError
				r.decode(t, &e)
				require.NotNil(t, e.Error.Field, "%.60q", tc.body)
				require.Equal(t, tc.field, *e.Error.Field, "%.60q: %s", tc.body, e.Error.Message)
				require.Contains(t, e.Error.Message, tc.msg, "%.60q", tc.body)
			}
		}
		// An args filter over its 64 KiB limit, inside the body limit.
		big := fmt.Sprintf(`{"args": {"k": "%s"}}`, strings.Repeat("x", 65<<10))
		r := b.do(t, "POST", "/v1/jobs/cancel", big, "Authorization", bulkOperator)
		require.Equal(t, http.StatusBadRequest, r.status, "%.200s", r.body)
		require.Contains(t, string(r.body), `"field":"args"`)
		require.Equal(t, 2, b.countWhere(t, `status = 'PENDING'`))
	})

	t.Run("IsForOperatorsOnly", func(t *testing.T) {
		t.Parallel()
		b := setupBulk(t)
		b.jobs(t, "mail", `{}`, pulsetype.StatusPending, 1)
		for _, path := range []string{"/v1/jobs/cancel", "/v1/jobs/delete"} {
			r := b.do(t, "POST", path, `{"topic": "mail", "dry_run": true}`, "Authorization", bulkProducer)
			require.Equal(t, http.StatusForbidden, r.status, path)
			r = b.do(t, "POST", path, `{"topic": "mail"}`)
			require.Equal(t, http.StatusUnauthorized, r.status, path)
		}
		require.Equal(t, 1, b.countWhere(t, `status = 'PENDING'`))
	})

	t.Run("RefusesACrossSitePost", func(t *testing.T) {
		t.Parallel()
		b := setupBulk(t)
		b.jobs(t, "mail", `{}`, pulsetype.StatusPending, 1)
		r := b.do(t, "POST", "/v1/jobs/cancel", `{"topic": "mail"}`,
			"Authorization", bulkOperator, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
		require.Equal(t, http.StatusForbidden, r.status)
		r = b.do(t, "POST", "/v1/jobs/cancel", `{"topic": "mail"}`, "Authorization", bulkOperator, "Origin", "https://evil.example")
		require.Equal(t, http.StatusForbidden, r.status)
		require.Equal(t, 1, b.countWhere(t, `status = 'PENDING'`))
	})
}
