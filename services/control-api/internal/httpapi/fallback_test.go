package httpapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

// Under /v1/, a path no route has is a 404 and a method its route does not
// take a 405 naming the methods it does (Allow), both in the JSON error
// format; nothing is written.
func TestUnknownRoutesAnswerInJSON(t *testing.T) {
	t.Parallel()
	bundle := apitest.New(t, apitest.Options{MaxArgsBytes: maxArgsBytes, MaxBatchJobs: 10})
	mux := http.NewServeMux()
	h := httpapi.New(bundle.Service, httpapi.Options{MaxArgsBytes: maxArgsBytes})
	h.Register(mux)
	h.RegisterSchedules(mux, api.NewSchedules(bundle.Store, nil, nil))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b := &testBundle{Bundle: bundle, url: srv.URL}
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/v1/nope", http.StatusNotFound, "not_found", ""},
		{"GET", "/v1/", http.StatusNotFound, "not_found", ""},
		{"POST", "/v1/jobs/x/frob", http.StatusNotFound, "not_found", ""},
		{"GET", "/v1/job", http.StatusNotFound, "not_found", ""},
		{"GET", "/v1/%ff%00", http.StatusNotFound, "not_found", ""},
		{"DELETE", "/v1/jobs", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD, POST"},
		{"PUT", "/v1/jobs/0190", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD"},
		{"GET", "/v1/jobs/0190/cancel", http.StatusMethodNotAllowed, "method_not_allowed", "POST"},
		{"PATCH", "/v1/schedules/0190", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD, PUT, DELETE"},
		{"GET", "/v1/jobs:batch", http.StatusMethodNotAllowed, "method_not_allowed", "POST"},
	} {
		req, err := http.NewRequest(tc.method, b.url+tc.path, strings.NewReader(`{"topic":"t"}`))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var e apiError
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		r := response{status: resp.StatusCode, body: data}
		require.Equal(t, tc.status, r.status, "%s %s: %s", tc.method, tc.path, r.body)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "%s %s: %d %s", tc.method, tc.path, resp.StatusCode, data)
		r.decode(t, &e)
		require.Equal(t, tc.code, e.Error.Code, "%s %s", tc.method, tc.path)
		require.NotEmpty(t, e.Error.Message)
		require.Equal(t, tc.allow, resp.Header.Get("Allow"), "%s %s", tc.method, tc.path)
	}
	require.Zero(t, b.CountJobs(t))
}
