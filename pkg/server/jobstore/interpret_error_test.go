package jobstore

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// A connection Postgres ended under a statement (a crash, a restart) is
// the outage it is, on the pool's path and on database/sql's (the read
// side): the caller may retry, as the SDK does for Unavailable.
func TestInterpretErrorCallsALostConnectionUnavailable(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		io.EOF,
		fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF),
		fmt.Errorf("read: %w", pgconn.ErrConnClosed),
		driver.ErrBadConn,
		sql.ErrConnDone,
	} {
		if got := apierr.KindOf(interpretError("get job", err)); got != apierr.KindUnavailable {
			t.Errorf("%v: kind %v, want Unavailable", err, got)
		}
	}
	if got := apierr.KindOf(interpretError("get job", errors.New("something else"))); got != apierr.KindInternal {
		t.Errorf("an unknown error: kind %v, want Internal", got)
	}
}

// A CHECK violation becomes a typed error for the caller and stays a data
// error for IsDataError: a batch refused by a constraint can still be split.
func TestInterpretErrorKeepsThePostgresCause(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pg   *pgconn.PgError
		kind apierr.Kind
	}{
		{&pgconn.PgError{Code: "23514", ConstraintName: "jobs_priority_range", Message: "violates"}, apierr.KindInvalidArgument},
		{&pgconn.PgError{Code: "23514", ConstraintName: "jobs_status_transition", Message: "illegal"}, apierr.KindInvalidTransition},
		{&pgconn.PgError{Code: "22P02", Message: "bad input"}, apierr.KindInvalidArgument},
		{&pgconn.PgError{Code: "22021", Message: "invalid byte sequence"}, apierr.KindInvalidArgument},
		{&pgconn.PgError{Code: "22P05", Message: "unsupported Unicode escape sequence"}, apierr.KindInvalidArgument},
		{&pgconn.PgError{Code: "22003", Message: "value overflows numeric format"}, apierr.KindInvalidArgument},
		{&pgconn.PgError{Code: "22008", Message: "timestamp out of range"}, apierr.KindInvalidArgument},
		{&pgconn.PgError{Code: "22012", Message: "division by zero"}, apierr.KindInternal},
	}
	for _, tc := range cases {
		err := interpretError("report", tc.pg)
		if got := apierr.KindOf(err); got != tc.kind {
			t.Errorf("%s: kind %v, want %v", tc.pg.Code, got, tc.kind)
		}
		if !IsDataError(err) {
			t.Errorf("%s: IsDataError false after interpretError (%v)", tc.pg.Code, err)
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr != tc.pg {
			t.Errorf("%s: the Postgres error is not in the chain", tc.pg.Code)
		}
	}
	if err := interpretError("claim", &pgconn.PgError{Code: "23514", ConstraintName: "jobs_priority_range", Message: "m"}); err.Error() != "priority: m" {
		t.Errorf("message changed: %q", err.Error())
	}
	if IsDataError(interpretError("claim", &pgconn.PgError{Code: "57P01", Message: "terminating"})) {
		t.Error("a shutdown is not a data error")
	}
}

// Each way Postgres rolls a statement back on its own, raised by a real
// Postgres, is Unavailable: a retry can succeed, and the batch it hit is
// not split (no member caused it).
func TestInterpretErrorRolledBackIsUnavailable(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, code := range []string{"40001", "40P01", "55P03"} {
		_, raised := pool.Exec(t.Context(), `DO $$ BEGIN RAISE EXCEPTION 'rolled back' USING ERRCODE = '`+code+`'; END $$`)
		var pgErr *pgconn.PgError
		if !errors.As(raised, &pgErr) || pgErr.Code != code {
			t.Fatalf("%s: Postgres raised %v", code, raised)
		}
		err := interpretError("insert jobs", raised)
		if got := apierr.KindOf(err); got != apierr.KindUnavailable {
			t.Errorf("%s: kind %v, want unavailable (%v)", code, got, err)
		}
		if IsDataError(err) {
			t.Errorf("%s: a data error, so a batch would be split for it", code)
		}
		if !errors.Is(err, raised) {
			t.Errorf("%s: the Postgres error is not in the chain", code)
		}
	}
	if got := apierr.KindOf(interpretError("insert jobs", &pgconn.PgError{Code: "40002", Message: "deferred check"})); got == apierr.KindUnavailable {
		t.Error("40002 (a deferred constraint the data broke) is not a retry")
	}
}
