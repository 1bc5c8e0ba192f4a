package jobstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/google/uuid"

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
	Status Status
	// Before pages: only jobs with id < Before (ids are uuid v7, so this is
	// "submitted earlier").
	Before *uuid.UUID
	Limit  int
}

// List returns jobs newest first by walking the primary key backwards.
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
	if f.Before != nil {
		q = q.Where("j.id < ?", *f.Before)
	}
	if err := q.OrderExpr("j.id DESC").Limit(int64(f.Limit)).Scan(ctx); err != nil {
		return nil, readError("list jobs", err)
	}
	return jobsOf(rows), nil
}
