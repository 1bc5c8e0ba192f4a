package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// A submit with a replace_key replaces the key's pending job (answered
// replaced, with that job's id), and the job shows its key and count;
// keep_first answers the job as a duplicate; bad input is refused naming
// the field, with nothing written.
func TestSubmitReplaceKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	post := func(body string) pulsehttp.SubmitResult {
		t.Helper()
		r := b.do(t, "POST", "/v1/jobs", body)
		require.Contains(t, []int{http.StatusOK, http.StatusCreated}, r.status, string(r.body))
		var s pulsehttp.SubmitResult
		r.decode(t, &s)
		return s
	}
	first := post(`{"topic":"t","args":{"v":1},"run_at":"2099-01-01T00:00:00Z","replace_key":"user:1"}`)
	require.False(t, first.Duplicate)
	again := post(`{"topic":"t","args":{"v":2},"run_at":"2099-01-01T00:00:00Z","replace_key":"user:1","replace_mode":"replace"}`)
	require.Equal(t, pulsehttp.SubmitResult{ID: first.ID, Duplicate: true, Replaced: true}, again)
	kept := post(`{"topic":"t","args":{"v":3},"replace_key":"user:1","replace_mode":"keep_first"}`)
	require.Equal(t, pulsehttp.SubmitResult{ID: first.ID, Duplicate: true}, kept)

	r := b.do(t, "GET", "/v1/jobs/"+first.ID, "")
	require.Equal(t, http.StatusOK, r.status)
	var got pulsehttp.Job
	r.decode(t, &got)
	require.Equal(t, "user:1", got.ReplaceKey)
	require.EqualValues(t, 1, got.Replaced)
	require.JSONEq(t, `{"v":2}`, string(got.Args))

	before := b.CountJobs(t)
	for body, field := range map[string]string{
		`{"topic":"t","replace_key":"` + strings.Repeat("k", 256) + `"}`: "replace_key",
		`{"topic":"t","replace_key":"a\u0000b"}`:                         "replace_key",
		`{"topic":"t","replace_key":"k","replace_mode":"latest"}`:        "replace_mode",
		`{"topic":"t","replace_mode":"keep_first"}`:                      "replace_mode",
		`{"topic":"t","replace_key":"k","idempotency_key":"i"}`:          "replace_key",
		`{"topic":"t","replace_key":"k","unique_for":"1h"}`:              "replace_key",
		`{"topic":"t","replace_key":7}`:                                  "replace_key",
	} {
		requireError(t, b.do(t, "POST", "/v1/jobs", body), http.StatusBadRequest, "invalid_argument", field)
	}
	r = b.do(t, "POST", "/v1/jobs:batch", `{"jobs":[{"topic":"t","replace_key":"ok"},{"topic":"t","replace_key":"k","replace_mode":"x"}]}`)
	requireError(t, r, http.StatusBadRequest, "invalid_argument", "jobs[1].replace_mode")
	require.Equal(t, before, b.CountJobs(t), "nothing written")

	// A batch: both entries of one key end in one job, the last args.
	r = b.do(t, "POST", "/v1/jobs:batch", `{"jobs":[{"topic":"t.b","args":{"v":1},"replace_key":"k"},{"topic":"t.b","args":{"v":2},"replace_key":"k"}]}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var batch struct {
		Results []pulsehttp.SubmitResult `json:"results"`
	}
	r.decode(t, &batch)
	require.Len(t, batch.Results, 2)
	require.Equal(t, pulsehttp.SubmitResult{ID: batch.Results[0].ID, Duplicate: true, Replaced: true}, batch.Results[1])
}
