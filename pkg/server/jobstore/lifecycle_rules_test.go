package jobstore

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Every rule of migration 00005 reaches callers as a typed error: a rule
// about a job's life is an invalid transition, a rule about a value an
// invalid argument naming the field.
func TestInterpretErrorMapsTheLifecycleGuards(t *testing.T) {
	t.Parallel()
	for _, rule := range []string{
		"jobs_status_transition", "jobs_attempts_fence", "jobs_terminal_frozen", "jobs_born_pending",
		"jobs_identity_immutable", "jobs_errors_append_only", "jobs_locked_by_claim_only",
		"jobs_timestamps_not_future", "jobs_timestamps_ordered", "jobs_delete_terminal_only",
	} {
		err := interpretError("op", &pgconn.PgError{Code: "23514", ConstraintName: rule, Message: "refused"})
		if apierr.KindOf(err) != apierr.KindInvalidTransition {
			t.Errorf("%s: kind %v, want InvalidTransition", rule, apierr.KindOf(err))
		}
		if !IsDataError(err) {
			t.Errorf("%s: not a data error, so a batch it refuses could not be split", rule)
		}
	}
	for rule, field := range map[string]string{
		"jobs_queued_has_attempts_left": "max_attempts",
		"jobs_timestamps_finite":        "run_at",
		"jobs_locked_by_not_empty":      "worker_id",
	} {
		err := interpretError("op", &pgconn.PgError{Code: "23514", ConstraintName: rule, Message: "refused"})
		if apierr.KindOf(err) != apierr.KindInvalidArgument || apierr.FieldOf(err) != field {
			t.Errorf("%s: kind %v field %q, want InvalidArgument on %q", rule, apierr.KindOf(err), apierr.FieldOf(err), field)
		}
	}
}
