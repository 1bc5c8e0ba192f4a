package jobstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/jobstore/jobstoretest"
)

// TestListWindowBoundsTheScan: an args search walks at most the window's
// jobs per page, however rare the matches, and pages on from where the
// window ended; followed to the end, it finds exactly what an unbounded
// List finds, in the same order.
func TestListWindowBoundsTheScan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 25 jobs, newest last; every 7th carries the searched key.
	jobs := make([]pulsetype.NewJob, 25)
	for i := range jobs {
		jobs[i] = newJob("t", 5)
		jobs[i].Args = []byte(fmt.Sprintf(`{"n": %d}`, i))
		if i%7 == 0 {
			jobs[i].Args = []byte(fmt.Sprintf(`{"n": %d, "hit": true}`, i))
		}
	}
	_, err := b.store.Insert(ctx, jobs)
	require.NoError(t, err)
	filter := jobstore.ListFilter{Args: []byte(`{"hit": true}`), Limit: 2}

	want, err := b.store.List(ctx, jobstore.ListFilter{Args: filter.Args, Limit: 100})
	require.NoError(t, err)
	require.Len(t, want, 4, "jobs 0, 7, 14, 21")

	// A window of 5: pages end where the window ends, found or not.
	var got []uuid.UUID
	f := filter
	pages := 0
	for {
		page, resume, err := b.store.ListWindow(ctx, f, 5)
		require.NoError(t, err)
		pages++
		require.LessOrEqual(t, len(page), f.Limit)
		for _, j := range page {
			got = append(got, j.ID)
		}
		switch {
		case len(page) == f.Limit:
			require.Nil(t, resume, "a full page resumes from its last job")
			f.Before = &page[len(page)-1].ID
		case resume != nil:
			f.Before = &resume.ID
		default:
			var ids []uuid.UUID
			for _, j := range want {
				ids = append(ids, j.ID)
			}
			require.Equal(t, ids, got, "the windowed pages find what List finds, newest first")
			require.Equal(t, 5, pages, "25 jobs, 5 at a time")
			return
		}
		require.Less(t, pages, 10, "the paging never ends")
	}
}

func TestListWindowByFinished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := time.Now().Add(-time.Hour)
	var ids []uuid.UUID
	for i := range 6 {
		args := `{"c": "other"}`
		if i%2 == 0 {
			args = `{"c": "acme"}`
		}
		ids = append(ids, jobstoretest.MustCreate(t, b.pool, jobstoretest.Spec{
			Topic: "mail", Args: args, Status: pulsetype.StatusDeadLettered, MaxAttempts: 1,
			SubmittedAt: base, StartedAt: base, FinishedAt: base.Add(time.Duration(i) * time.Minute),
		}))
	}
	f := jobstore.ListFilter{Args: []byte(`{"c": "acme"}`), ByFinished: true, Limit: 10}
	page, resume, err := b.store.ListWindow(ctx, f, 3)
	require.NoError(t, err)
	require.Len(t, page, 1, "the latest three deaths hold one acme job: the 5th")
	require.Equal(t, ids[4], page[0].ID)
	require.NotNil(t, resume)
	require.Equal(t, ids[3], resume.ID, "the window's last job")
	f.Before, f.BeforeFinished = &resume.ID, resume.Finished
	page, resume, err = b.store.ListWindow(ctx, f, 3)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[2], ids[0]}, []uuid.UUID{page[0].ID, page[1].ID})
	require.Nil(t, resume, "the window reached past the last job")
}

// TestListPageBoundedInBytes: a listing that leaves args out reads none;
// one bounded in bytes ends at the job that reaches the bound, holding at
// least one, and says it was cut.
func TestListPageBoundedInBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := fmt.Sprintf(`{"pad": %q}`, strings.Repeat("x", 100<<10)) // ~100 KiB each
	jobs := make([]pulsetype.NewJob, 6)
	for i := range jobs {
		jobs[i] = newJob("t", 5)
		jobs[i].Args = []byte(big)
	}
	_, err := b.store.Insert(ctx, jobs)
	require.NoError(t, err)

	p, err := b.store.ListPage(ctx, jobstore.ListFilter{Limit: 10, WithoutArgs: true, MaxBytes: 150 << 10}, 0)
	require.NoError(t, err)
	require.Len(t, p.Jobs, 6, "without args the jobs are small")
	require.False(t, p.Cut)
	for _, j := range p.Jobs {
		require.Nil(t, j.Args)
		require.Equal(t, "t", j.Topic, "every other column is read")
	}

	p, err = b.store.ListPage(ctx, jobstore.ListFilter{Limit: 10, MaxBytes: 250 << 10}, 0)
	require.NoError(t, err)
	require.Len(t, p.Jobs, 3, "the third job's args reach 250 KiB")
	require.True(t, p.Cut)
	require.JSONEq(t, big, string(p.Jobs[0].Args))

	p, err = b.store.ListPage(ctx, jobstore.ListFilter{Limit: 10, MaxBytes: 1}, 0)
	require.NoError(t, err)
	require.Len(t, p.Jobs, 1, "a page holds at least one job")
	require.True(t, p.Cut)

	p, err = b.store.ListPage(ctx, jobstore.ListFilter{Limit: 3, MaxBytes: 300 << 10}, 0)
	require.NoError(t, err)
	require.Len(t, p.Jobs, 3)
	require.False(t, p.Cut, "the limit, not the bound, ended it")
}
