package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Get reads one job.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*Job, error) {
	job, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, apierr.NotFound("job", id.String())
	}
	if err != nil {
		return nil, interpretError("get job", err)
	}
	return job, nil
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
	var where []string
	var args []any
	if f.Topic != "" {
		args = append(args, f.Topic)
		where = append(where, fmt.Sprintf("topic = $%d", len(args)))
	}
	if f.Status != "" {
		args = append(args, string(f.Status))
		where = append(where, fmt.Sprintf("status = $%d", len(args)))
	}
	if f.Before != nil {
		args = append(args, *f.Before)
		where = append(where, fmt.Sprintf("id < $%d", len(args)))
	}
	q := `SELECT ` + jobColumns + ` FROM jobs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, f.Limit)
	q += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, interpretError("list jobs", err)
	}
	defer rows.Close()
	var out []*Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, interpretError("list jobs", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list jobs", err)
	}
	return out, nil
}
