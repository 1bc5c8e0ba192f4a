package pulsetx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// ErrInvalidJob matches (errors.Is) an error for a job that validation or
// the schema refused; its message names the field ("timeout: is 25h0m0s;
// it must be between 1s and 24h0m0s").
var ErrInvalidJob = errors.New("pulsetx: invalid job")

// Enqueuer enqueues jobs in transactions. The zero value uses control-api's
// default limits; set MaxArgsBytes when control-api runs with another
// PULSE_MAX_ARGS_BYTES, so both refuse the same args.
type Enqueuer struct {
	// MaxArgsBytes bounds one job's args; 0 means 1 MiB, control-api's
	// default.
	MaxArgsBytes int
}

// Enqueue enqueues one job inside tx with the zero Enqueuer.
func Enqueue(ctx context.Context, tx pgx.Tx, topic string, args any, opts ...pulse.EnqueueOption) (pulse.Submitted, error) {
	return Enqueuer{}.Enqueue(ctx, tx, topic, args, opts...)
}

// EnqueueSQL enqueues one job inside a database/sql transaction with the
// zero Enqueuer.
func EnqueueSQL(ctx context.Context, tx *sql.Tx, topic string, args any, opts ...pulse.EnqueueOption) (pulse.Submitted, error) {
	return Enqueuer{}.EnqueueSQL(ctx, tx, topic, args, opts...)
}

// Enqueue enqueues one job to topic inside tx: it exists, and workers are
// woken for it, once tx commits, and never if tx rolls back. args is
// encoded as [pulse.Client.Enqueue] encodes it. A duplicate (an
// idempotency key held by a live job, or a [pulse.UniqueFor] period held
// by a job with the same topic and args, including one enqueued earlier
// in tx) answers that job with Duplicate set.
//
// An error for a refused job matches ErrInvalidJob and writes nothing. An
// error from the database leaves tx aborted, as any failed statement does:
// roll it back.
func (e Enqueuer) Enqueue(ctx context.Context, tx pgx.Tx, topic string, args any, opts ...pulse.EnqueueOption) (pulse.Submitted, error) {
	out, err := e.enqueue(ctx, pgxQueryer{tx}, []pulse.JobRequest{{Topic: topic, Args: args, Options: opts}}, "")
	if err != nil {
		return pulse.Submitted{}, err
	}
	return out[0], nil
}

// EnqueueMany enqueues jobs inside tx, in order; they are validated
// first, so a refused job enqueues none (and tx stays usable). Results are
// in request order.
func (e Enqueuer) EnqueueMany(ctx context.Context, tx pgx.Tx, jobs []pulse.JobRequest) ([]pulse.Submitted, error) {
	return e.enqueue(ctx, pgxQueryer{tx}, jobs, "jobs")
}

// EnqueueSQL is Enqueue for a database/sql transaction.
func (e Enqueuer) EnqueueSQL(ctx context.Context, tx *sql.Tx, topic string, args any, opts ...pulse.EnqueueOption) (pulse.Submitted, error) {
	out, err := e.enqueue(ctx, sqlQueryer{tx}, []pulse.JobRequest{{Topic: topic, Args: args, Options: opts}}, "")
	if err != nil {
		return pulse.Submitted{}, err
	}
	return out[0], nil
}

// EnqueueManySQL is EnqueueMany for a database/sql transaction.
func (e Enqueuer) EnqueueManySQL(ctx context.Context, tx *sql.Tx, jobs []pulse.JobRequest) ([]pulse.Submitted, error) {
	return e.enqueue(ctx, sqlQueryer{tx}, jobs, "jobs")
}

// enqueue validates every job, then inserts them one statement each.
// prefix names the jobs in errors ("jobs" → "jobs[2].timeout"; "" for
// one job: "timeout").
func (e Enqueuer) enqueue(ctx context.Context, q jobstore.Queryer, reqs []pulse.JobRequest, prefix string) ([]pulse.Submitted, error) {
	jobs := make([]pulsetype.NewJob, len(reqs))
	for i := range reqs {
		name := prefix
		if prefix != "" {
			name = fmt.Sprintf("%s[%d]", prefix, i)
		}
		spec, err := reqs[i].Spec()
		if err != nil {
			return nil, fmt.Errorf("%w: %s", ErrInvalidJob, withName(name, err))
		}
		job, err := jobspec.Validate(name, spec, jobspec.Limits{MaxArgsBytes: e.MaxArgsBytes})
		if err != nil {
			return nil, typed(err)
		}
		jobspec.WithTraceContext(ctx, &job)
		jobs[i] = job
	}
	out := make([]pulse.Submitted, len(jobs))
	for i, job := range jobs {
		res, err := jobstore.InsertOne(ctx, q, job)
		if err != nil {
			if prefix != "" {
				err = fmt.Errorf("%s[%d]: %w", prefix, i, err)
			}
			return nil, typed(err)
		}
		out[i] = pulse.Submitted{ID: res.ID.String(), Duplicate: res.Duplicate}
	}
	return out, nil
}

// typed makes a refused job's error match ErrInvalidJob.
func typed(err error) error {
	if apierr.KindOf(err) == apierr.KindInvalidArgument {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	return fmt.Errorf("pulsetx: %w", err)
}

func withName(name string, err error) string {
	if name == "" {
		return err.Error()
	}
	return name + ": " + err.Error()
}

// pgxQueryer runs InsertOne's statements on a pgx transaction.
type pgxQueryer struct{ tx pgx.Tx }

func (q pgxQueryer) QueryText(ctx context.Context, sql string, args ...any) ([]string, error) {
	rows, err := q.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// sqlQueryer runs InsertOne's statements on a database/sql transaction.
type sqlQueryer struct{ tx *sql.Tx }

func (q sqlQueryer) QueryText(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := q.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
