package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// "timeout" and "unique_for" are Go durations. A hostile or out-of-range
// value is a 400 naming the field, and nothing is written; in a batch, the
// whole batch is refused naming the member.
func TestSubmitTimeoutAndUniqueForAreValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, field := range []string{"timeout", "unique_for"} {
		for _, bad := range []string{
			`"-5s"`, `"0s"`, `"500ms"`, `"1e1000000"`, `"99999999999999999999h"`, `"9223372036854775807ns"`,
			`"400d"`, `"8800h"`, `"soon"`, `"30"`, `"1s\u0000"`, "\"1s\xff\"", `30`, `true`, `{"s":1}`, `"1.0000001s"`,
		} {
			if field == "unique_for" && bad == `"8800h"` {
				bad = `"9000h"` // 8800h is within unique_for's 366 days
			}
			body := fmt.Sprintf(`{"topic":"t","%s":%s}`, field, bad)
			requireError(t, b.do(t, "POST", "/v1/jobs", body), http.StatusBadRequest, "invalid_argument", field)
			batch := fmt.Sprintf(`{"jobs":[{"topic":"t"},{"topic":"t","%s":%s}]}`, field, bad)
			requireError(t, b.do(t, "POST", "/v1/jobs:batch", batch), http.StatusBadRequest, "invalid_argument", "jobs[1]."+field)
		}
	}
	require.Zero(t, b.CountJobs(t))
}

// A job submitted with a timeout shows it; one without shows null.
func TestSubmitTimeoutIsStoredAndShown(t *testing.T) {
	t.Parallel()
	b := setup(t)

	s := b.submit(t, `{"topic":"t","timeout":"1m30s"}`)
	r := b.do(t, "GET", "/v1/jobs/"+s.ID, "")
	require.Equal(t, http.StatusOK, r.status)
	var got struct {
		Timeout *string `json:"timeout"`
	}
	r.decode(t, &got)
	require.NotNil(t, got.Timeout)
	require.Equal(t, "1m30s", *got.Timeout)

	s = b.submit(t, `{"topic":"t","timeout":""}`)
	r = b.do(t, "GET", "/v1/jobs/"+s.ID, "")
	var raw map[string]json.RawMessage
	r.decode(t, &raw)
	require.Equal(t, "null", string(raw["timeout"]))
}

// The same topic and args within the period answer the first job, 200
// and "duplicate": true, single or batched, however the args are spelled;
// fifty racing submits make one job.
func TestSubmitUniqueForAnswersTheFirstJob(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first := b.submit(t, `{"topic":"report.build","args":{"day":"2026-11-23","shop":7},"unique_for":"1h"}`)
	require.False(t, first.Duplicate)

	r := b.do(t, "POST", "/v1/jobs", `{"topic":"report.build","args":{"shop":7, "day":"2026-11-23"},"unique_for":"10m"}`)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var dup submitted
	r.decode(t, &dup)
	require.Equal(t, submitted{ID: first.ID, Duplicate: true}, dup)

	r = b.do(t, "POST", "/v1/jobs:batch", `{"jobs":[
		{"topic":"report.build","args":{"day":"2026-11-23","shop":7},"unique_for":"1h"},
		{"topic":"report.build","args":{"day":"2026-11-24","shop":7},"unique_for":"1h"},
		{"topic":"report.build","args":{"day":"2026-11-24","shop":7},"unique_for":"1h"}]}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var batch struct {
		Results []submitted `json:"results"`
	}
	r.decode(t, &batch)
	require.Equal(t, submitted{ID: first.ID, Duplicate: true}, batch.Results[0])
	require.False(t, batch.Results[1].Duplicate)
	require.Equal(t, submitted{ID: batch.Results[1].ID, Duplicate: true}, batch.Results[2])

	// Racing single submits (coalesced into shared inserts).
	const producers = 50
	ids := make([]string, producers)
	var wg sync.WaitGroup
	for i := range producers {
		wg.Go(func() {
			r := b.do(t, "POST", "/v1/jobs", `{"topic":"report.race","args":{"n":1},"unique_for":"1h"}`)
			var s submitted
			r.decode(t, &s)
			ids[i] = s.ID
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	var n int
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE topic = 'report.race'`).Scan(&n))
	require.Equal(t, 1, n)
}
