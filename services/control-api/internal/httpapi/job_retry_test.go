package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// "retry" is an object of Go durations in one form, {"base", "max"} or
// {"fixed"}. Anything else is a 400 naming the member, and nothing is
// written; in a batch the member carries its index.
func TestSubmitRetryIsValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, c := range []struct{ retry, field string }{
		{`{"bsae":"2s"}`, "retry.bsae"},                    // unknown key
		{`{"base":"2s","fixed":"5s"}`, "retry"},            // both forms
		{`{"max":"5s","fixed":"5s"}`, "retry"},             // both forms
		{`{}`, "retry"},                                    // no form
		{`{"max":"10m"}`, "retry.max"},                     // max without base
		{`{"base":"10m","max":"1m"}`, "retry.max"},         // base > max
		{`{"base":"-2s"}`, "retry.base"},                   // negative
		{`{"fixed":"0s"}`, "retry.fixed"},                  // zero
		{`{"fixed":"500us"}`, "retry.fixed"},               // below 1ms
		{`{"fixed":"8785h"}`, "retry.fixed"},               // > 366 days
		{`{"base":"1s","max":"9000h"}`, "retry.max"},       // > 366 days
		{`{"base":"soon"}`, "retry.base"},                  // not a duration
		{`{"base":"30"}`, "retry.base"},                    // no unit
		{`{"base":"400d"}`, "retry.base"},                  // no such unit
		{`{"base":"99999999999999999999h"}`, "retry.base"}, // huge
		{`{"fixed":"1e1000000s"}`, "retry.fixed"},          // huge
		{`{"base":2}`, "retry.base"},                       // wrong type
		{`{"fixed":"1s\u0000"}`, "retry"},                  // NUL: the member Postgres would refuse
		{`{"base":"1.0000001s"}`, "retry.base"},            // finer than a microsecond
		{`"2s"`, "retry"},                                  // not an object
		{`[]`, "retry"},                                    // not an object
	} {
		body := fmt.Sprintf(`{"topic":"t","retry":%s}`, c.retry)
		requireError(t, b.do(t, "POST", "/v1/jobs", body), http.StatusBadRequest, "invalid_argument", c.field)
		batch := fmt.Sprintf(`{"jobs":[{"topic":"t"},{"topic":"t","retry":%s}]}`, c.retry)
		requireError(t, b.do(t, "POST", "/v1/jobs:batch", batch), http.StatusBadRequest, "invalid_argument", "jobs[1]."+c.field)
	}
	require.Zero(t, b.CountJobs(t))
}

// A job submitted with a retry policy shows it as it was given (Go
// durations, normalised); one without shows null.
func TestSubmitRetryIsStoredAndShown(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for body, want := range map[string]*pulsehttp.RetryPolicy{
		`{"topic":"t","retry":{"base":"2s","max":"10m"}}`: {Base: "2s", Max: "10m0s"},
		`{"topic":"t","retry":{"base":"1500ms"}}`:         {Base: "1.5s"},
		`{"topic":"t","retry":{"fixed":"30s"}}`:           {Fixed: "30s"},
		`{"topic":"t","retry":null}`:                      nil,
		`{"topic":"t"}`:                                   nil,
	} {
		s := b.submit(t, body)
		r := b.do(t, "GET", "/v1/jobs/"+s.ID, "")
		require.Equal(t, http.StatusOK, r.status)
		var raw map[string]json.RawMessage
		r.decode(t, &raw)
		if want == nil {
			require.Equal(t, "null", string(raw["retry"]), body)
			continue
		}
		var got pulsehttp.RetryPolicy
		require.NoError(t, json.Unmarshal(raw["retry"], &got))
		require.Equal(t, *want, got, body)
	}

	// A batch stores each member's own.
	r := b.do(t, "POST", "/v1/jobs:batch", `{"jobs":[{"topic":"t","retry":{"fixed":"1m"}},{"topic":"t"}]}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var res struct {
		Results []submitted `json:"results"`
	}
	r.decode(t, &res)
	var first struct {
		Retry *pulsehttp.RetryPolicy `json:"retry"`
	}
	b.do(t, "GET", "/v1/jobs/"+res.Results[0].ID, "").decode(t, &first)
	require.Equal(t, &pulsehttp.RetryPolicy{Fixed: "1m0s"}, first.Retry)
}
