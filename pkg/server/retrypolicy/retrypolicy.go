// Package retrypolicy is how a dispatch-gateway or the reaper treats
// PULSE_RETRY_BACKOFF_UNIT and PULSE_RETRY_BACKOFF_MAX (ADR-0013): the
// retry policy lives in Postgres (the retry_policy row, migration 00007),
// and the variables, when set, write that row as the service starts. The
// row stays the one truth: every gateway's report and the reaper's sweep
// read it in the statement that settles a failure, whoever wrote it last.
package retrypolicy

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// The variables, and the bounds the schema holds them to
// (retry_policy_unit_range, retry_policy_max_range).
const (
	EnvUnit = "PULSE_RETRY_BACKOFF_UNIT"
	EnvMax  = "PULSE_RETRY_BACKOFF_MAX"

	MaxUnit  = 24 * time.Hour
	MaxDelay = 30 * 24 * time.Hour
)

// Store is the part of jobstore.Store the policy needs.
type Store interface {
	RetryPolicy(ctx context.Context) (jobstore.RetryPolicy, error)
	SetRetryPolicy(ctx context.Context, unit, maxDelay *time.Duration, by string) (before, after jobstore.RetryPolicy, err error)
}

// Validate checks the variables that are set against the schema's bounds,
// naming the variable at fault, so a bad value fails before the database
// is reached. A cap below the row's unit is found when the row is written.
func Validate(unit, maxDelay config.OptionalDuration) error {
	switch {
	case unit.Set && (unit.D < 0 || unit.D > MaxUnit):
		return config.Invalid(EnvUnit, "is %s; it must be between 0s and %s", unit.D, MaxUnit)
	case maxDelay.Set && (maxDelay.D < 0 || maxDelay.D > MaxDelay):
		return config.Invalid(EnvMax, "is %s; it must be between 0s and %s", maxDelay.D, MaxDelay)
	case unit.Set && maxDelay.Set && maxDelay.D < unit.D:
		return config.Invalid(EnvMax, "is %s; it must be at least %s (%s)", maxDelay.D, EnvUnit, unit.D)
	}
	return nil
}

// Instance names this process for updated_by: "<service> <id>", the id
// being the host and process id when the service has none of its own.
func Instance(service, id string) string {
	if id == "" {
		host, _ := os.Hostname()
		id = host + "-" + strconv.Itoa(os.Getpid())
	}
	return service + " " + id
}

// Apply is called once as a service starts. With neither variable set it
// reads the row and logs the policy in force. With either set it writes
// what is set to the row in the name of by and logs that it did; when the
// row held other numbers that someone else set, it warns: two services (or
// a service and an operator) disagree, and the last to start wins. It
// returns the policy in force.
func Apply(ctx context.Context, store Store, unit, maxDelay config.OptionalDuration, by string, logger *slog.Logger) (jobstore.RetryPolicy, error) {
	if !unit.Set && !maxDelay.Set {
		p, err := store.RetryPolicy(ctx)
		if err != nil {
			return jobstore.RetryPolicy{}, err
		}
		logger.Info("retry policy (the retry_policy row; "+EnvUnit+" and "+EnvMax+" unset)",
			"unit", p.Unit, "max", p.Max, "updated_by", p.UpdatedBy, "updated_at", p.UpdatedAt)
		return p, nil
	}
	before, after, err := store.SetRetryPolicy(ctx, unit.Ptr(), maxDelay.Ptr(), by)
	if err != nil {
		return jobstore.RetryPolicy{}, refused(err, unit, maxDelay)
	}
	logger.Info("retry policy set from the environment into the retry_policy row",
		"unit", after.Unit, "max", after.Max, EnvUnit, unit.String(), EnvMax, maxDelay.String())
	if !before.Same(after) && before.UpdatedBy != by && before.UpdatedBy != migrationDefault {
		logger.Warn("retry policy: this service's "+EnvUnit+"/"+EnvMax+" replaced a different policy; "+
			"every gateway and the reaper follow the row, so the service or operator that set it now runs with these numbers too. "+
			"Set the variables alike on every service (or on none, and UPDATE retry_policy)",
			"was_unit", before.Unit, "was_max", before.Max, "was_set_by", before.UpdatedBy, "was_set_at", before.UpdatedAt,
			"unit", after.Unit, "max", after.Max)
	}
	return after, nil
}

// migrationDefault is updated_by of the row as migration 00007 wrote it.
const migrationDefault = "migration 00007"

// refused names the variable whose value the schema refused.
func refused(err error, unit, maxDelay config.OptionalDuration) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.ConstraintName {
	case "retry_policy_unit_range":
		return config.Invalid(EnvUnit, "is %s; the retry_policy row refuses it (%s)", unit, pgErr.Message)
	case "retry_policy_max_range":
		if maxDelay.Set {
			return config.Invalid(EnvMax, "is %s; it must be at least the policy's unit and at most %s (the retry_policy row refuses it: %s)", maxDelay, MaxDelay, pgErr.Message)
		}
		return config.Invalid(EnvUnit, "is %s; it is above the policy's cap (backoff_max in retry_policy); set %s too", unit, EnvMax)
	}
	return err
}
