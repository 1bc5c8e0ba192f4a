// Package apierr is the one place where pulse's typed errors are defined and
// mapped to gRPC codes and HTTP statuses. Stores and validators return these
// errors; transports translate them here and nowhere else.
package apierr

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind classifies an error for the transports.
type Kind int

// The kinds, each with one gRPC code and one HTTP status.
const (
	KindInternal Kind = iota
	KindInvalidArgument
	KindNotFound
	KindInvalidTransition
	KindUnavailable
	KindUnauthenticated
	KindPermissionDenied
	KindAlreadyExists
	KindResourceExhausted
)

// Error is a classified error. Field names the offending input for
// KindInvalidArgument, in the request's own spelling ("jobs[3].topic").
type Error struct {
	Kind  Kind
	Field string
	Msg   string
	Err   error
	// RetryAfter, on KindResourceExhausted, is how long the caller should
	// wait before trying again (0: no hint).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	switch {
	case e.Field != "" && e.Err != nil:
		return fmt.Sprintf("%s: %s: %v", e.Field, e.Msg, e.Err)
	case e.Field != "":
		return e.Field + ": " + e.Msg
	case e.Err != nil && e.Msg != "":
		return e.Msg + ": " + e.Err.Error()
	case e.Err != nil:
		return e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotFound) and friends match on Kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Field == "" && t.Err == nil && t.Kind == e.Kind
}

// Sentinels for errors.Is.
var (
	ErrInvalidArgument   = &Error{Kind: KindInvalidArgument}
	ErrNotFound          = &Error{Kind: KindNotFound}
	ErrInvalidTransition = &Error{Kind: KindInvalidTransition}
	ErrUnavailable       = &Error{Kind: KindUnavailable}
	ErrUnauthenticated   = &Error{Kind: KindUnauthenticated}
	ErrPermissionDenied  = &Error{Kind: KindPermissionDenied}
	ErrResourceExhausted = &Error{Kind: KindResourceExhausted}
)

// Invalid reports bad input in field.
func Invalid(field, format string, args ...any) error {
	return &Error{Kind: KindInvalidArgument, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// NotFound reports an unknown id.
func NotFound(what, id string) error {
	return &Error{Kind: KindNotFound, Msg: fmt.Sprintf("%s %q not found", what, id)}
}

// InvalidTransition reports a guarded update that matched no row because
// the job was not in a state that allows the change.
func InvalidTransition(format string, args ...any) error {
	return &Error{Kind: KindInvalidTransition, Msg: fmt.Sprintf(format, args...)}
}

// Unavailable wraps a failure to reach the database or another dependency.
func Unavailable(msg string, err error) error {
	return &Error{Kind: KindUnavailable, Msg: msg, Err: err}
}

// Unauthenticated reports missing or wrong credentials.
func Unauthenticated(msg string) error { return &Error{Kind: KindUnauthenticated, Msg: msg} }

// PermissionDenied reports a known identity whose role may not do this.
func PermissionDenied(msg string) error { return &Error{Kind: KindPermissionDenied, Msg: msg} }

// ResourceExhausted reports a limit the caller hit (too many failed
// attempts, too much in flight); retryAfter, when positive, says when
// trying again may succeed.
func ResourceExhausted(msg string, retryAfter time.Duration) error {
	return &Error{Kind: KindResourceExhausted, Msg: msg, RetryAfter: retryAfter}
}

// RetryAfterOf returns the retry hint of a ResourceExhausted error.
func RetryAfterOf(err error) (time.Duration, bool) {
	var e *Error
	if errors.As(err, &e) && e.Kind == KindResourceExhausted && e.RetryAfter > 0 {
		return e.RetryAfter, true
	}
	return 0, false
}

// KindOf classifies any error; unclassified errors are internal, except
// context errors which keep their own meaning.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// FieldOf returns the offending field of an invalid-argument error.
func FieldOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}

// GRPCStatus maps err to a gRPC status. Errors that already carry a status
// pass through unchanged.
func GRPCStatus(err error) *status.Status {
	if err == nil {
		return nil
	}
	if s, ok := status.FromError(err); ok {
		return s
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.New(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, err.Error())
	}
	return status.New(grpcCode(KindOf(err)), err.Error())
}

func grpcCode(k Kind) codes.Code {
	switch k {
	case KindInvalidArgument:
		return codes.InvalidArgument
	case KindNotFound:
		return codes.NotFound
	case KindInvalidTransition:
		return codes.FailedPrecondition
	case KindUnavailable:
		return codes.Unavailable
	case KindUnauthenticated:
		return codes.Unauthenticated
	case KindPermissionDenied:
		return codes.PermissionDenied
	case KindAlreadyExists:
		return codes.AlreadyExists
	case KindResourceExhausted:
		return codes.ResourceExhausted
	}
	return codes.Internal
}

// HTTPStatus maps err to an HTTP status code.
func HTTPStatus(err error) int {
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return httpFromCode(s.Code())
	}
	switch {
	case errors.Is(err, context.Canceled):
		return 499
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return httpFromCode(grpcCode(KindOf(err)))
}

func httpFromCode(c codes.Code) int {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.FailedPrecondition, codes.AlreadyExists:
		return http.StatusConflict
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// HTTPCode is the short machine-readable code in HTTP error bodies
// ("invalid_argument", "not_found", ...).
func HTTPCode(err error) string {
	s := GRPCStatus(err)
	switch s.Code() {
	case codes.InvalidArgument:
		return "invalid_argument"
	case codes.NotFound:
		return "not_found"
	case codes.FailedPrecondition:
		return "invalid_transition"
	case codes.Unavailable:
		return "unavailable"
	case codes.Unauthenticated:
		return "unauthenticated"
	case codes.PermissionDenied:
		return "permission_denied"
	case codes.AlreadyExists:
		return "already_exists"
	case codes.DeadlineExceeded:
		return "deadline_exceeded"
	case codes.Canceled:
		return "canceled"
	case codes.ResourceExhausted:
		return "resource_exhausted"
	}
	return "internal"
}

// CorrelationID returns a fresh random id, 16 hex characters, that ties a
// generic answer to the log line holding the error behind it.
func CorrelationID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// Concealed reports whether err's answer must not carry its text: a
// server-side failure (Internal, Unavailable), whose text may name the
// database's user, host or database, or hold a driver's message.
func Concealed(err error) bool {
	switch GRPCStatus(err).Code() {
	case codes.Internal, codes.Unavailable, codes.Unknown, codes.DataLoss:
		return true
	}
	return false
}

// PublicMessage is what a caller is told about a concealed failure: a
// generic sentence and the correlation id the ERROR log line carries too.
func PublicMessage(err error, correlationID string) string {
	what := "internal error"
	if GRPCStatus(err).Code() == codes.Unavailable {
		what = "service unavailable"
	}
	return what + " (correlation id " + correlationID + ")"
}
