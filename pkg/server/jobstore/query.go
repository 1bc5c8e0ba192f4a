package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/google/uuid"

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
	switch {
	case f.ByFinished:
		q = q.Where("j.finished_at IS NOT NULL")
		if f.Before != nil && f.BeforeFinished != nil {
			q = q.Where("(j.finished_at, j.id) < (?, ?)", f.BeforeFinished.UTC(), *f.Before)
		}
		q = q.OrderExpr("j.finished_at DESC, j.id DESC")
	default:
		if f.Before != nil {
			q = q.Where("j.id < ?", *f.Before)
		}
		q = q.OrderExpr("j.id DESC")
	}
	if err := q.Limit(int64(f.Limit)).Scan(ctx); err != nil {
		return nil, readError("list jobs", err)
	}
	return jobsOf(rows), nil
}
