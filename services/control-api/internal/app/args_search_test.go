package app_test

import (
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/config"
)

// TestArgsSearchWalksAWindowAPage: the dashboard's args search looks at
// api.ArgsSearchWindow jobs a page. With the only match older than the
// first window, the first page shows no job and a link to go on, and the
// page it leads to shows the match.
func TestArgsSearchWalksAWindowAPage(t *testing.T) {
	t.Parallel()
	var dbURL string
	a, _ := startWith(t, func(c *config.Config) { dbURL = c.DatabaseURL })
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// The match first (the oldest id: ids are uuid v7), then a window and
	// a half of jobs that do not match.
	var match string
	require.NoError(t, conn.QueryRow(ctx, `
		INSERT INTO jobs (id, topic, args) VALUES ('00000000-0000-7000-8000-000000000001', 'mail', '{"customer": "acme"}')
		RETURNING id::text`).Scan(&match))
	_, err = conn.Exec(ctx, `
		INSERT INTO jobs (id, topic, args)
		SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'mail', '{"customer": "globex"}'
		FROM generate_series(2, $1::int) AS g`, api.ArgsSearchWindow*3/2)
	require.NoError(t, err)

	get := func(path string) string {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.AdminAddr()+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", authtest.Basic("op", "op-pass"))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		return string(body)
	}
	next := regexp.MustCompile(`href="([^"]+)" rel="next"`)

	page := get("/ui/jobs?args=" + url.QueryEscape(`{"customer":"acme"}`))
	require.Contains(t, page, `id="search-goes-on"`, "the first window holds no match")
	require.NotContains(t, page, match)
	m := next.FindStringSubmatch(page)
	require.NotNil(t, m, "a link goes on to older jobs")
	page = get(html.UnescapeString(m[1]))
	require.Contains(t, page, match, "the next window holds the match")
	require.Nil(t, next.FindStringSubmatch(page), "nothing is left beyond it")
}
