package jobstore_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// Tags go in with the job, come back with it, and filter listings, by
// the GIN index (jobs_tags_idx) rather than a walk of every job.
func TestTagsFilterListings(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	a, b, c := newJob("t", 5), newJob("t", 5), newJob("t", 5)
	a.Tags, b.Tags = []string{"batch-7", "tenant=acme"}, []string{"tenant=acme"}
	_, err := store.Insert(t.Context(), []pulsetype.NewJob{a, b, c})
	require.NoError(t, err)

	job, err := store.Get(t.Context(), a.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"batch-7", "tenant=acme"}, job.Tags)
	job, err = store.Get(t.Context(), c.ID)
	require.NoError(t, err)
	require.Nil(t, job.Tags)

	ids := func(f jobstore.ListFilter) []string {
		f.Limit = 10
		jobs, err := store.List(t.Context(), f)
		require.NoError(t, err)
		var out []string
		for _, j := range jobs {
			out = append(out, j.ID.String())
		}
		return out
	}
	require.ElementsMatch(t, []string{a.ID.String(), b.ID.String()}, ids(jobstore.ListFilter{Tag: "tenant=acme"}))
	require.Equal(t, []string{a.ID.String()}, ids(jobstore.ListFilter{Tag: "batch-7"}))
	require.Empty(t, ids(jobstore.ListFilter{Tag: "tenant=other"}))

	// The filter can use the index (with sequential scans off, as a big
	// table would make the planner choose).
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	_, err = tx.Exec(t.Context(), `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	var plan strings.Builder
	rows, err := tx.Query(t.Context(), `EXPLAIN SELECT id FROM jobs j WHERE j.tags @> ARRAY['tenant=acme']::text[] ORDER BY id DESC LIMIT 50`)
	require.NoError(t, err)
	for rows.Next() {
		var l string
		require.NoError(t, rows.Scan(&l))
		plan.WriteString(l + "\n")
	}
	require.NoError(t, rows.Err())
	require.Contains(t, plan.String(), "jobs_tags_idx", plan.String())
}

// The schema's rules on tags, through raw SQL: at most 16 of the charset
// at birth, and never changed after.
func TestSchemaTags(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	insert := func(tags string) string {
		return `INSERT INTO jobs (id, topic, tags) VALUES (gen_random_uuid(), 't', ` + tags + `)`
	}
	many := make([]string, pulsetype.MaxTags+1)
	for i := range many {
		many[i] = "'t" + strings.Repeat("x", i) + "'"
	}
	runRefusals(t, pool, []refusal{
		{"AComma", pendingJob, insert(`ARRAY['a,b']`), "jobs_tags_format"},
		{"ASpace", pendingJob, insert(`ARRAY['a b']`), "jobs_tags_format"},
		{"Empty", pendingJob, insert(`ARRAY['']`), "jobs_tags_format"},
		{"NoTags", pendingJob, insert(`ARRAY[]::text[]`), "jobs_tags_format"},
		{"ANullTag", pendingJob, insert(`ARRAY[NULL]::text[]`), "jobs_tags_format"},
		{"TooLong", pendingJob, insert(`ARRAY['` + strings.Repeat("a", pulsetype.MaxTagLength+1) + `']`), "jobs_tags_format"},
		{"TooMany", pendingJob, insert(`ARRAY[` + strings.Join(many, ",") + `]`), "jobs_tags_format"},
		{"TwoDimensions", pendingJob, insert(`ARRAY[['a'],['b']]`), "jobs_tags_format"},
		{"AddedLater", pendingJob, `UPDATE jobs SET tags = ARRAY['late'] WHERE id = $1`, "jobs_identity_immutable"},
		{"ChangedOnARunningJob", runningJob, `UPDATE jobs SET tags = ARRAY['x'] WHERE id = $1`, "jobs_identity_immutable"},
	})
	t.Run("AtTheBoundsAreStored", func(t *testing.T) {
		_, err := pool.Exec(t.Context(), insert(`ARRAY[`+strings.Join(many[:pulsetype.MaxTags], ",")+`]`))
		require.NoError(t, err)
		_, err = pool.Exec(t.Context(), insert(`ARRAY['`+strings.Repeat("a", pulsetype.MaxTagLength)+`', 'k=v', 'a.b:c/d_e-f']`))
		require.NoError(t, err)
	})
}
