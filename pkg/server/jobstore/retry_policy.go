package jobstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// RetryPolicy is the retry_policy row (migration 00007, ADR-0013): failed
// attempt n of a job with attempts left waits min(n² × Unit, Max), whether
// a worker reported the failure or its lease lapsed. The row is the one
// place the policy is held; the report and the reap read it in the
// statement that settles the failure.
type RetryPolicy struct {
	Unit time.Duration
	Max  time.Duration
	// UpdatedAt and UpdatedBy say who set the policy last: a service names
	// itself; an UPDATE by hand is recorded as "<application_name> as
	// <user>".
	UpdatedAt time.Time
	UpdatedBy string
}

// DefaultRetryPolicy is what migration 00007 writes: attempts² seconds,
// capped at an hour.
var DefaultRetryPolicy = RetryPolicy{Unit: time.Second, Max: time.Hour}

// Delay is the wait after failed attempt number attempt, as
// pulse_retry_delay computes it.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	d := time.Duration(float64(attempt) * float64(attempt) * float64(p.Unit))
	if d > p.Max || d < 0 {
		return p.Max
	}
	return d
}

// Same reports whether p and o hold the same numbers.
func (p RetryPolicy) Same(o RetryPolicy) bool { return p.Unit == o.Unit && p.Max == o.Max }

// retryPolicyColumns reads the row with the intervals as microseconds.
const retryPolicyColumns = `(extract(epoch FROM backoff_unit) * 1000000)::bigint,
	(extract(epoch FROM backoff_max) * 1000000)::bigint, updated_at, updated_by`

func scanRetryPolicy(row rowScanner) (RetryPolicy, error) {
	var p RetryPolicy
	var unit, maxDelay int64
	if err := row.Scan(&unit, &maxDelay, &p.UpdatedAt, &p.UpdatedBy); err != nil {
		return RetryPolicy{}, err
	}
	p.Unit, p.Max = time.Duration(unit)*time.Microsecond, time.Duration(maxDelay)*time.Microsecond
	return p, nil
}

// RetryPolicy reads the policy in force.
func (s *Store) RetryPolicy(ctx context.Context) (RetryPolicy, error) {
	p, err := scanRetryPolicy(s.pool.QueryRow(ctx, `SELECT `+retryPolicyColumns+` FROM retry_policy`))
	if err != nil {
		return RetryPolicy{}, interpretError("read retry policy", err)
	}
	return p, nil
}

// SetRetryPolicy sets the unit and the cap (a nil one keeps the row's) in
// the name of by, and returns the row as it was and as it is now. The
// schema refuses a unit outside 0..1 day and a cap below the unit or above
// 30 days (retry_policy_unit_range, retry_policy_max_range): the error
// names the constraint.
func (s *Store) SetRetryPolicy(ctx context.Context, unit, maxDelay *time.Duration, by string) (before, after RetryPolicy, err error) {
	var u, m *string
	if unit != nil {
		v := intervalOf(*unit)
		u = &v
	}
	if maxDelay != nil {
		v := intervalOf(*maxDelay)
		m = &v
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if before, err = scanRetryPolicy(tx.QueryRow(ctx, `SELECT `+retryPolicyColumns+` FROM retry_policy FOR UPDATE`)); err != nil {
			return err
		}
		after, err = scanRetryPolicy(tx.QueryRow(ctx, `
			UPDATE retry_policy
			SET backoff_unit = COALESCE($1::interval, backoff_unit),
			    backoff_max = COALESCE($2::interval, backoff_max),
			    updated_by = $3
			RETURNING `+retryPolicyColumns, u, m, by))
		return err
	})
	if err != nil {
		return RetryPolicy{}, RetryPolicy{}, interpretError("set retry policy", err)
	}
	return before, after, nil
}
