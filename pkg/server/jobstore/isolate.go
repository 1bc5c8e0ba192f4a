package jobstore

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsDataError reports whether err is Postgres refusing a statement's data
// (SQLSTATE class 22, data exception, or 23, integrity constraint
// violation) rather than the statement failing for reasons no member
// caused (a lost connection, a timeout, a server shutting down). Only a
// data error makes splitting a batch worthwhile: the same statement over a
// smaller batch can then succeed.
func IsDataError(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23":
		return true
	}
	return false
}

// Isolate runs exec over a whole batch as one statement and, if Postgres
// refuses the batch's data, bisects it until every member it accepts has
// succeeded and each member it refuses has failed alone, with its own
// error. exec must be all-or-nothing (one statement, one transaction) and
// return one result per item, in order. A failure that is not a data error
// fails every member of the sub-batch it hit, unsplit: splitting cannot
// help a lost connection.
//
// The happy path is one call to exec and no extra allocation; the cost of
// a refused member is O(log n) extra statements per culprit.
func Isolate[T, R any](items []T, exec func([]T) ([]R, error)) ([]R, []error) {
	res := make([]R, len(items))
	var errs []error
	var run func(lo, hi int)
	run = func(lo, hi int) {
		out, err := exec(items[lo:hi])
		if err == nil {
			copy(res[lo:hi], out)
			return
		}
		if hi-lo > 1 && IsDataError(err) {
			mid := lo + (hi-lo)/2
			run(lo, mid)
			run(mid, hi)
			return
		}
		if errs == nil {
			errs = make([]error, len(items))
		}
		for i := lo; i < hi; i++ {
			errs[i] = err
		}
	}
	if len(items) > 0 {
		run(0, len(items))
	}
	return res, errs
}
