package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Get reads one job.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*Job, error) {
	var row jobRow
	err := s.selectJobs(&row).Where("j.id = ?", id).Scan(ctx)
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
	// ByFinished lists finished jobs by finished_at, latest first (dead
	// letters by their time of death), instead of by id.
	ByFinished bool
	// Before pages: only jobs with id < Before (ids are uuid v7, so this is
	// "submitted earlier"); with ByFinished, jobs before (BeforeFinished,
	// Before) in the listing's order.
	Before         *uuid.UUID
	BeforeFinished *time.Time
	Limit          int
	// from bounds the listing below (ListWindow): only jobs at or after
	// this point in the listing's order.
	from *ListCursor
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
	if f.Limit <= 0 || window <= 0 {
		return nil, nil, nil
	}
	// The window's last job and the one after it, if any: an index walk
	// of window+1 entries in the listing's order, no row filter.
	var bound []struct {
		ID       uuid.UUID  `bun:"id,type:uuid"`
		Finished *time.Time `bun:"finished_at"`
	}
	q := s.reads().NewSelect().TableExpr("jobs AS j").ColumnExpr("j.id, j.finished_at")
	q = orderAndPage(q, f)
	if err := q.Offset(int64(window-1)).Limit(2).Scan(ctx, &bound); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, nil, readError("list jobs", err)
	}
	if len(bound) == 2 {
		// Jobs remain beyond the window: bound the page by its last one.
		f.from = &ListCursor{ID: bound[0].ID, Finished: bound[0].Finished}
	}
	jobs, err = s.List(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	if len(jobs) < f.Limit && f.from != nil {
		resume = f.from
	}
	return jobs, resume, nil
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
	if f.Limit <= 0 {
		return nil, nil
	}
	var rows []jobRow
	q := s.selectJobs(&rows)
	if f.Topic != "" {
		q = q.Where("j.topic = ?", f.Topic)
	}
	if f.Status != "" {
		q = q.Where("j.status = ?", string(f.Status))
	}
	if f.Args != nil {
		q = q.Where("j.args @> ?::jsonb", string(f.Args))
	}
	if c := f.from; c != nil {
		if f.ByFinished && c.Finished != nil {
			q = q.Where("(j.finished_at, j.id) >= (?, ?)", c.Finished.UTC(), c.ID)
		} else {
			q = q.Where("j.id >= ?", c.ID)
		}
	}
	q = orderAndPage(q, f)
	if err := q.Limit(int64(f.Limit)).Scan(ctx); err != nil {
		return nil, readError("list jobs", err)
	}
	return jobsOf(rows), nil
}
