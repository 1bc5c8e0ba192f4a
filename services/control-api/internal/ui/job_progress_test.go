package ui_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// A running job's page shows its progress and metadata as the handler
// last reported them, a completed job's its result, and a job that
// reported nothing neither.
func TestJobPageShowsProgressMetadataAndResult(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	b := tb.browser(t, operatorAuth)
	id := tb.insert(t, pulsetype.NewJob{Topic: "page.progress", MaxAttempts: 5})
	quiet := tb.insert(t, pulsetype.NewJob{Topic: "page.quiet", MaxAttempts: 5})

	claimed, err := tb.Store.Claim(t.Context(), []string{"page.progress"}, []string{"w"}, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	ref := pulsetype.AttemptRef{ID: id, Attempt: claimed[0].Attempt}
	pct := int16(60)
	held, err := tb.Store.SetProgress(t.Context(), "w", ref, &pct, []byte(`{"stage":"<upload>","files":3}`))
	require.NoError(t, err)
	require.True(t, held)

	code, body := b.get("/ui/jobs/" + id.String())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<progress max="100" value="60"></progress> 60%`)
	require.Contains(t, body, `&#34;stage&#34;: &#34;&lt;upload&gt;&#34;`, "metadata shown, escaped")
	require.NotContains(t, body, `id="result"`)

	_, err = tb.Store.Report(t.Context(), "w", []pulsetype.Result{{Ref: ref, Outcome: pulsetype.OutcomeComplete, Result: []byte(`{"url":"s3://b/k"}`)}})
	require.NoError(t, err)
	_, body = b.get("/ui/jobs/" + id.String())
	require.Contains(t, body, `<pre class="args" id="result">{
  &#34;url&#34;: &#34;s3://b/k&#34;
}</pre>`)

	_, body = b.get("/ui/jobs/" + quiet.String())
	require.NotContains(t, body, `id="progress"`)
	require.NotContains(t, body, `id="metadata"`)
	require.NotContains(t, body, `id="result"`)
}
