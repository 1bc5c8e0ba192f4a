package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tags given at submit come back sorted and without duplicates, filter
// GET /v1/jobs?tag=, and bad ones are refused naming the tag, with
// nothing written.
func TestSubmitTagsAndListByTag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.submit(t, `{"topic":"t","tags":["tenant=acme","batch-7","tenant=acme"]}`)
	b.submit(t, `{"topic":"t","tags":["tenant=other"]}`)
	b.submit(t, `{"topic":"t"}`)

	r := b.do(t, "GET", "/v1/jobs/"+a.ID, "")
	require.Equal(t, http.StatusOK, r.status)
	var got struct {
		Tags []string `json:"tags"`
	}
	r.decode(t, &got)
	require.Equal(t, []string{"batch-7", "tenant=acme"}, got.Tags)

	r = b.do(t, "GET", "/v1/jobs?tag=tenant%3Dacme", "")
	require.Equal(t, http.StatusOK, r.status)
	var list struct {
		Jobs []struct {
			ID   string   `json:"id"`
			Tags []string `json:"tags"`
		} `json:"jobs"`
	}
	r.decode(t, &list)
	require.Len(t, list.Jobs, 1)
	require.Equal(t, a.ID, list.Jobs[0].ID)

	before := b.CountJobs(t)
	for body, field := range map[string]string{
		`{"topic":"t","tags":["a,b"]}`:                             "tags[0]",
		`{"topic":"t","tags":["ok","-leading"]}`:                   "tags[1]",
		`{"topic":"t","tags":["` + strings.Repeat("a", 65) + `"]}`: "tags[0]",
		`{"topic":"t","tags":["a\u0000"]}`:                         "tags",
		`{"topic":"t","tags":` + manyTags(17) + `}`:                "tags",
		`{"topic":"t","tags":"tenant=acme"}`:                       "tags",
	} {
		requireError(t, b.do(t, "POST", "/v1/jobs", body), http.StatusBadRequest, "invalid_argument", field)
	}
	require.Equal(t, before, b.CountJobs(t), "nothing written")

	requireError(t, b.do(t, "GET", "/v1/jobs?tag=a%20b", ""), http.StatusBadRequest, "invalid_argument", "tag")
}

func manyTags(n int) string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = `"t` + strings.Repeat("x", i) + `"`
	}
	return "[" + strings.Join(tags, ",") + "]"
}
