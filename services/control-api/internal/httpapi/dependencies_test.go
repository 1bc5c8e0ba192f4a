package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// A graph submitted in one batch ("$n" references) and a job depending on
// an existing one: each job shows its workflow and how many parents it
// waits for; bad references, cycles and unknown ids are refused naming
// the field, with nothing written.
func TestSubmitDependencies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, "POST", "/v1/jobs:batch", `{"jobs":[
		{"topic":"t"},
		{"topic":"t","depends_on":["$0"]},
		{"topic":"t","depends_on":[{"job":"$0","on_parent_failure":"run"}]},
		{"topic":"t","depends_on":["$1","$2"]}]}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var batch struct {
		Results []struct {
			ID string `json:"id"`
		} `json:"results"`
	}
	r.decode(t, &batch)
	require.Len(t, batch.Results, 4)

	type view struct {
		WorkflowID string `json:"workflow_id"`
		BlockedBy  int32  `json:"blocked_by"`
	}
	get := func(id string) view {
		r := b.do(t, "GET", "/v1/jobs/"+id, "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var v view
		r.decode(t, &v)
		return v
	}
	wf := batch.Results[0].ID
	require.Equal(t, view{WorkflowID: wf}, get(batch.Results[0].ID))
	require.Equal(t, view{WorkflowID: wf, BlockedBy: 1}, get(batch.Results[1].ID))
	require.Equal(t, view{WorkflowID: wf, BlockedBy: 2}, get(batch.Results[3].ID))

	child := b.submit(t, `{"topic":"t","depends_on":["`+batch.Results[3].ID+`"]}`)
	require.Equal(t, view{WorkflowID: child.ID, BlockedBy: 1}, get(child.ID))

	before := b.CountJobs(t)
	for body, field := range map[string]string{
		`{"topic":"t","depends_on":["` + uuid.NewString() + `"]}`:                   "depends_on[0]",
		`{"topic":"t","depends_on":["$0"]}`:                                         "depends_on[0]",
		`{"topic":"t","depends_on":["not-an-id"]}`:                                  "depends_on[0]",
		`{"topic":"t","depends_on":["\u0000"]}`:                                     "depends_on",
		`{"topic":"t","depends_on":[{"job":"` + wf + `","on_parent_failure":"x"}]}`: "depends_on[0].on_parent_failure",
		`{"topic":"t","depends_on":[{"job":"` + wf + `","policy":"run"}]}`:          "depends_on[0].policy",
		`{"topic":"t","depends_on":[7]}`:                                            "depends_on[0]",
		`{"topic":"t","unique_for":"1h","depends_on":["` + wf + `"]}`:               "unique_for",
	} {
		requireError(t, b.do(t, "POST", "/v1/jobs", body), http.StatusBadRequest, "invalid_argument", field)
	}
	for body, field := range map[string]string{
		`{"jobs":[{"topic":"t","depends_on":["$1"]},{"topic":"t","depends_on":["$0"]}]}`:                                   "depends_on",
		`{"jobs":[{"topic":"t"},{"topic":"t","depends_on":["$2"]}]}`:                                                       "jobs[1].depends_on[0]",
		`{"jobs":[{"topic":"t"},{"topic":"t","depends_on":["$0","$0"]}]}`:                                                  "jobs[1].depends_on[1]",
		`{"jobs":[{"topic":"t"},{"topic":"t","depends_on":["$0","` + uuid.NewString() + `"]}]}`:                            "jobs[1].depends_on[1]",
		`{"jobs":[{"topic":"t"},{"topic":"t","depends_on":["$99999999999999999999999999"]}]}`:                              "jobs[1].depends_on[0]",
		`{"jobs":[{"topic":"t"},{"topic":"t","depends_on":["` + strings.Repeat("$", 100) + `"]}]}`:                         "jobs[1].depends_on[0]",
		`{"jobs":[{"topic":"t","depends_on":["$1"]},{"topic":"t","depends_on":["$2"]},{"topic":"t","depends_on":["$0"]}]}`: "depends_on",
	} {
		requireError(t, b.do(t, "POST", "/v1/jobs:batch", body), http.StatusBadRequest, "invalid_argument", field)
	}
	require.Equal(t, before, b.CountJobs(t), "nothing written")
}
