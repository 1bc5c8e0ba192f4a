package ui_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// The jobs browser filters by tag, a job's page links each of its tags to
// that filter, a bad tag is refused naming the field, and no bulk action
// is offered under a tag filter (the bulk actions do not filter by tag).
func TestJobsBrowserFiltersByTag(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	b := tb.browser(t, operatorAuth)
	acme := tb.insert(t, pulsetype.NewJob{Topic: "page.tags", MaxAttempts: 5, Tags: []string{"batch-7", "tenant=acme"}})
	other := tb.insert(t, pulsetype.NewJob{Topic: "page.tags", MaxAttempts: 5, Tags: []string{"tenant=other"}})

	code, body := b.get("/ui/jobs?tag=" + url.QueryEscape("tenant=acme"))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, acme.String())
	require.NotContains(t, body, other.String())
	require.Contains(t, body, `name="tag" value="tenant=acme"`)
	require.NotContains(t, body, `id="bulk-actions"`)

	code, body = b.get("/ui/jobs?topic=page.tags")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="bulk-actions"`, "without a tag the bulk actions are there")

	_, body = b.get("/ui/jobs/" + acme.String())
	require.Contains(t, body, `<a class="tag" href="/ui/jobs?tag=batch-7"><code>batch-7</code></a>`)
	require.Contains(t, body, `<a class="tag" href="/ui/jobs?tag=tenant%3dacme"><code>tenant=acme</code></a>`)

	code, body = b.get("/ui/jobs?tag=" + url.QueryEscape("a b"))
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, `data-field="tag"`)
}
