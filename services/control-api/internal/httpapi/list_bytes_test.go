package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// TestListingsAreBoundedInBytes: GET /v1/jobs leaves args out unless
// include=args; with them, a page of large jobs ends once its args reach
// api.ListPageBytesMax and its token goes on, so following the tokens
// lists every job, each page bounded in bytes.
func TestListingsAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Ten jobs of about 1 MiB of args each: 10 MiB in all.
	_, err := b.Pool.Exec(t.Context(), `
		INSERT INTO jobs (id, topic, args)
		SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'big',
		       jsonb_build_object('pad', repeat('x', 1000000))
		FROM generate_series(1, 10) AS g`)
	require.NoError(t, err)

	type page struct {
		Jobs          []map[string]json.RawMessage `json:"jobs"`
		NextPageToken string                       `json:"next_page_token"`
	}
	list := func(q url.Values) (page, int) {
		t.Helper()
		r := b.do(t, "GET", "/v1/jobs?"+q.Encode(), "")
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var p page
		r.decode(t, &p)
		return p, len(r.body)
	}

	p, size := list(url.Values{"limit": {"500"}})
	require.Len(t, p.Jobs, 10, "without args, one page holds them all")
	require.Empty(t, p.NextPageToken)
	for _, j := range p.Jobs {
		require.NotContains(t, j, "args", "args are left out, not shown empty")
		require.Contains(t, j, "topic")
	}
	require.Less(t, size, 64<<10, "ten jobs without args are small")

	seen := map[string]bool{}
	q := url.Values{"limit": {"500"}, "include": {"args"}}
	pages := 0
	for {
		p, size := list(q)
		pages++
		require.LessOrEqual(t, size, api.ListPageBytesMax+(2<<20), "a page stops at the byte bound, past it by at most one job")
		for _, j := range p.Jobs {
			require.Contains(t, j, "args")
			var id string
			require.NoError(t, json.Unmarshal(j["id"], &id))
			require.False(t, seen[id], "a job listed twice")
			seen[id] = true
		}
		if p.NextPageToken == "" {
			break
		}
		require.Less(t, pages, 20)
		q.Set("page_token", p.NextPageToken)
	}
	require.Len(t, seen, 10, "every job, across pages")
	require.GreaterOrEqual(t, pages, 3, "10 MiB of args do not fit one 4 MiB page")

	r := b.do(t, "GET", "/v1/jobs?include=everything", "")
	requireError(t, r, http.StatusBadRequest, "invalid_argument", "include")
}
