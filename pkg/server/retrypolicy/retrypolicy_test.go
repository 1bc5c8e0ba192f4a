package retrypolicy_test

import (
	"bytes"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/retrypolicy"
)

func TestMain(m *testing.M) { os.Exit(pgtest.MainLeakChecked(m)) }

func set(d time.Duration) config.OptionalDuration { return config.OptionalDuration{D: d, Set: true} }

var unset config.OptionalDuration

func TestApply(t *testing.T) {
	ctx := t.Context()
	store := jobstore.New(pgtest.Pool(t))
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))

	// Nothing set: the row is read and logged, not written.
	p, err := retrypolicy.Apply(ctx, store, unset, unset, "reaper r-1", logger)
	require.NoError(t, err)
	require.True(t, p.Same(jobstore.DefaultRetryPolicy))
	require.Contains(t, logs.String(), "unset")
	require.Equal(t, "migration 00007", p.UpdatedBy)

	// A gateway sets the unit: written and logged, no warning over the
	// migration's default.
	logs.Reset()
	p, err = retrypolicy.Apply(ctx, store, set(10*time.Millisecond), unset, "dispatch-gateway gw-1", logger)
	require.NoError(t, err)
	require.Equal(t, jobstore.RetryPolicy{Unit: 10 * time.Millisecond, Max: time.Hour}, jobstore.RetryPolicy{Unit: p.Unit, Max: p.Max})
	require.Contains(t, logs.String(), "retry policy set from the environment")
	require.NotContains(t, logs.String(), "level=WARN")

	// Another gateway agrees: no warning.
	logs.Reset()
	_, err = retrypolicy.Apply(ctx, store, set(10*time.Millisecond), unset, "dispatch-gateway gw-2", logger)
	require.NoError(t, err)
	require.NotContains(t, logs.String(), "level=WARN")

	// The reaper disagrees: it wins (the row is the one truth) and warns,
	// naming who set the policy it replaced.
	logs.Reset()
	p, err = retrypolicy.Apply(ctx, store, set(2*time.Second), set(time.Minute), "reaper r-1", logger)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, p.Unit)
	require.Contains(t, logs.String(), "level=WARN")
	require.Contains(t, logs.String(), "was_set_by=\"dispatch-gateway gw-2\"")

	// A cap below the row's unit is refused by the schema, naming the
	// variable; the row is unchanged.
	_, err = retrypolicy.Apply(ctx, store, unset, set(time.Second), "reaper r-1", logger)
	var ce *config.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, retrypolicy.EnvMax, ce.Var)
	got, err := store.RetryPolicy(ctx)
	require.NoError(t, err)
	require.Equal(t, time.Minute, got.Max)

	// A unit above the row's cap names the unit.
	_, err = retrypolicy.Apply(ctx, store, set(2*time.Minute), unset, "reaper r-1", logger)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, retrypolicy.EnvUnit, ce.Var)
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		unit, max config.OptionalDuration
		bad       string
	}{
		{unset, unset, ""},
		{set(0), set(0), ""},
		{set(time.Second), set(time.Hour), ""},
		{set(-time.Second), unset, retrypolicy.EnvUnit},
		{set(25 * time.Hour), unset, retrypolicy.EnvUnit},
		{unset, set(31 * 24 * time.Hour), retrypolicy.EnvMax},
		{set(time.Minute), set(time.Second), retrypolicy.EnvMax},
	} {
		err := retrypolicy.Validate(c.unit, c.max)
		if c.bad == "" {
			require.NoError(t, err)
			continue
		}
		var ce *config.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, c.bad, ce.Var)
	}
}
