package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"reflect"
	"strings"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Get reads one job.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*Job, error) {
	var row jobRow
	err := s.selectJobs(&row).ColumnExpr(resultColumnSQL).Where("j.id = ?", id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, apierr.NotFound("job", id.String())
	}
	if err != nil {
		return nil, readError("get job", err)
	}
	return row.job(), nil
}

// ListFilter selects jobs for List. Zero fields do not filter.
type ListFilter struct {
	Topic  string
	Status pulsetype.Status
	// Args, a JSON object, keeps the jobs whose args contain it (jsonb
	// @>); nil does not filter. The caller validates it
	// (jobspec.ValidateArgsFilter).
	Args []byte
	// Tag keeps the jobs that carry it (jobs_tags_idx); "" does not
	// filter.
	Tag string
	// ByFinished lists finished jobs by finished_at, latest first (dead
	// letters by their time of death), instead of by id.
	ByFinished bool
	// Before pages: only jobs with id < Before (ids are uuid v7, so this is
	// "submitted earlier"); with ByFinished, jobs before (BeforeFinished,
	// Before) in the listing's order.
	Before         *uuid.UUID
	BeforeFinished *time.Time
	Limit          int
	// WithoutArgs leaves args out: the jobs come with nil Args, and the
	// column is not even read.
	WithoutArgs bool
	// MaxBytes, when positive, ends the listing early (ListPage's Cut)
	// once its jobs' args (unless WithoutArgs) and error histories reach
	// it; the job that reaches it is the last, so a listing holds at
	// least one job. The rows are read one by one, so no more than about
	// that many bytes of them are held.
	MaxBytes int
	// from bounds the listing below (ListWindow): only jobs at or after
	// this point in the listing's order.
	from *ListCursor
}

// Page is one page of a listing (ListPage).
type Page struct {
	Jobs []*Job
	// Resume, from a windowed listing, is where the next page starts when
	// the window ended before the page filled (ListWindow).
	Resume *ListCursor
	// Cut says the page ended early at ListFilter.MaxBytes: the next page
	// starts after its last job.
	Cut bool
}

// ListCursor is a point in a listing's order: a job id, and with
// ByFinished its finished_at.
type ListCursor struct {
	ID       uuid.UUID
	Finished *time.Time
}

// ListWindow is List over at most window jobs of the listing's order
// (from the page's Before on), whatever the filters select: its scan is
// bounded by the window, not by how rare the matches are, so a filter the
// indexes cannot serve (an args containment, jsonb @>) costs at most
// window rows a page. It returns up to f.Limit matches and, when the
// window ended before f.Limit were found and jobs remain beyond it, the
// window's last job: the next page starts there (Before = resume.ID,
// BeforeFinished = resume.Finished). A page may hold no job and still
// resume.
func (s *Store) ListWindow(ctx context.Context, f ListFilter, window int) (jobs []*Job, resume *ListCursor, err error) {
	if window <= 0 {
		return nil, nil, nil
	}
	p, err := s.ListPage(ctx, f, window)
	return p.Jobs, p.Resume, err
}

// ListPage is List, over a window of jobs when window is positive
// (ListWindow), and bounded in bytes when f.MaxBytes is (Page.Cut).
func (s *Store) ListPage(ctx context.Context, f ListFilter, window int) (Page, error) {
	if f.Limit <= 0 {
		return Page{}, nil
	}
	if window > 0 {
		// The window's last job and the one after it, if any: an index
		// walk of window+1 entries in the listing's order, no row filter.
		var bound []struct {
			ID       uuid.UUID  `bun:"id,type:uuid"`
			Finished *time.Time `bun:"finished_at"`
		}
		q := s.reads().NewSelect().TableExpr("jobs AS j").ColumnExpr("j.id, j.finished_at")
		q = orderAndPage(q, f)
		if err := q.Offset(int64(window-1)).Limit(2).Scan(ctx, &bound); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return Page{}, readError("list jobs", err)
		}
		if len(bound) == 2 {
			// Jobs remain beyond the window: bound the page by its last one.
			f.from = &ListCursor{ID: bound[0].ID, Finished: bound[0].Finished}
		}
	}
	jobs, cut, err := s.list(ctx, f)
	if err != nil {
		return Page{}, err
	}
	p := Page{Jobs: jobs, Cut: cut}
	if !cut && len(jobs) < f.Limit && f.from != nil {
		p.Resume = f.from
	}
	return p, nil
}

// orderAndPage adds a listing's order and its page's start (Before) to q.
func orderAndPage(q *bun.SelectQuery, f ListFilter) *bun.SelectQuery {
	if f.ByFinished {
		q = q.Where("j.finished_at IS NOT NULL")
		if f.Before != nil && f.BeforeFinished != nil {
			q = q.Where("(j.finished_at, j.id) < (?, ?)", f.BeforeFinished.UTC(), *f.Before)
		}
		return q.OrderExpr("j.finished_at DESC, j.id DESC")
	}
	if f.Before != nil {
		q = q.Where("j.id < ?", *f.Before)
	}
	return q.OrderExpr("j.id DESC")
}

// List returns jobs newest first by walking the primary key backwards, or
// finished jobs latest finished first (ByFinished).
func (s *Store) List(ctx context.Context, f ListFilter) ([]*Job, error) {
	jobs, _, err := s.list(ctx, f)
	return jobs, err
}

func (s *Store) list(ctx context.Context, f ListFilter) (jobs []*Job, cut bool, err error) {
	if f.Limit <= 0 {
		return nil, false, nil
	}
	var rows []jobRow
	q := s.selectJobs(&rows)
	if f.WithoutArgs {
		q = s.reads().NewSelect().Model(&rows).ColumnExpr(jobColumnsWithoutArgs).ColumnExpr(intervalMicrosSQL)
	}
	if f.Topic != "" {
		q = q.Where("j.topic = ?", f.Topic)
	}
	if f.Status != "" {
		q = q.Where("j.status = ?", string(f.Status))
	}
	if f.Args != nil {
		q = q.Where("j.args @> ?::jsonb", string(f.Args))
	}
	if f.Tag != "" {
		q = q.Where("j.tags @> ARRAY[?]::text[]", f.Tag)
	}
	if c := f.from; c != nil {
		if f.ByFinished && c.Finished != nil {
			q = q.Where("(j.finished_at, j.id) >= (?, ?)", c.Finished.UTC(), c.ID)
		} else {
			q = q.Where("j.id >= ?", c.ID)
		}
	}
	q = orderAndPage(q, f).Limit(int64(f.Limit))
	if f.MaxBytes <= 0 {
		if err := q.Scan(ctx); err != nil {
			return nil, false, readError("list jobs", err)
		}
		return jobsOf(rows), false, nil
	}
	// Bounded in bytes: read row by row and stop at the budget, so the
	// rows past it are never held (closing the result discards them).
	res, err := q.Rows(ctx)
	if err != nil {
		return nil, false, readError("list jobs", err)
	}
	defer res.Close()
	size := 0
	for res.Next() {
		var r jobRow
		if err := s.reads().ScanRow(ctx, res, &r); err != nil {
			return nil, false, readError("list jobs", err)
		}
		jobs = append(jobs, r.job())
		if size += len(r.Args) + len(r.Errors); size >= f.MaxBytes {
			return jobs, len(jobs) < f.Limit, nil
		}
	}
	if err := res.Err(); err != nil {
		return nil, false, readError("list jobs", err)
	}
	return jobs, false, nil
}

// jobColumnsWithoutArgs is jobRow's columns but args, as a listing that
// leaves args out selects them.
var jobColumnsWithoutArgs = func() string {
	table := readDialect.Tables().Get(reflect.TypeFor[jobRow]())
	var cols []string
	for _, f := range table.Fields {
		if f.Name != "args" && !f.Tag.HasOption("scanonly") {
			cols = append(cols, "j."+string(f.SQLName))
		}
	}
	return strings.Join(cols, ", ")
}()
