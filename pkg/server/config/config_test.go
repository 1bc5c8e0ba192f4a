package config_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type gatewaySpec struct {
	DatabaseURL string        `envconfig:"DATABASE_URL" required:"true"`
	LeaseTTL    time.Duration `split_words:"true" default:"30s"`
	GRPCAddr    string        `split_words:"true" default:":9090"`
	MaxStreams  int           `envconfig:"max_streams" default:"100"`
	Verbose     bool
	unexported  string //nolint:unused // never read: envconfig must skip unexported fields
	Skipped     string `ignored:"true"`
}

func (s *gatewaySpec) Validate() error {
	if s.LeaseTTL < time.Second {
		return config.Invalid("PULSE_LEASE_TTL", "must be at least 1s, got %s", s.LeaseTTL)
	}
	return nil
}

type plainSpec struct {
	Topic string `default:"default"`
}

// Tests here set process environment, so they cannot run in parallel.

func TestLoad(t *testing.T) {
	t.Run("FillsTheSpecFromPrefixedVariablesAndDefaults", func(t *testing.T) {
		t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
		t.Setenv("PULSE_LEASE_TTL", "45s")
		t.Setenv("PULSE_MAX_STREAMS", "7")

		var s gatewaySpec
		require.NoError(t, config.Load(&s))
		require.Equal(t, "postgres://localhost/pulse", s.DatabaseURL)
		require.Equal(t, 45*time.Second, s.LeaseTTL)
		require.Equal(t, ":9090", s.GRPCAddr)
		require.Equal(t, 7, s.MaxStreams)
	})

	t.Run("NamesTheVariableWhenAValueDoesNotParse", func(t *testing.T) {
		t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
		t.Setenv("PULSE_LEASE_TTL", "abc")

		err := config.Load(&gatewaySpec{})
		require.EqualError(t, err, `config: PULSE_LEASE_TTL: time: invalid duration "abc"`)
		var ce *config.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "PULSE_LEASE_TTL", ce.Var)
	})

	t.Run("NamesAMissingRequiredVariableWithItsPrefix", func(t *testing.T) {
		err := config.Load(&gatewaySpec{})
		require.EqualError(t, err, "config: PULSE_DATABASE_URL: required but not set")
	})

	t.Run("ReturnsTheValidateErrorUnchanged", func(t *testing.T) {
		t.Setenv("PULSE_DATABASE_URL", "postgres://localhost/pulse")
		t.Setenv("PULSE_LEASE_TTL", "10ms")

		err := config.Load(&gatewaySpec{})
		require.EqualError(t, err, "config: PULSE_LEASE_TTL: must be at least 1s, got 10ms")
	})

	t.Run("LoadsASpecWithoutValidate", func(t *testing.T) {
		t.Setenv("PULSE_TOPIC", "email.send")
		var s plainSpec
		require.NoError(t, config.Load(&s))
		require.Equal(t, "email.send", s.Topic)
	})

	t.Run("RejectsANonPointerSpec", func(t *testing.T) {
		require.Error(t, config.Load(plainSpec{}))
	})
}

func TestInvalid(t *testing.T) {
	t.Parallel()

	t.Run("FormatsTheMessageAfterTheVariable", func(t *testing.T) {
		t.Parallel()
		err := config.Invalid("PULSE_X", "must be one of %v", []string{"a", "b"})
		require.EqualError(t, err, "config: PULSE_X: must be one of [a b]")
	})

	t.Run("WrapsTheMessageAsTheCause", func(t *testing.T) {
		t.Parallel()
		err := config.Invalid("PULSE_X", "bad")
		require.EqualError(t, errors.Unwrap(err), "bad")
	})
}

func TestVars(t *testing.T) {
	t.Parallel()

	t.Run("ListsEveryVariableLoadReads", func(t *testing.T) {
		t.Parallel()
		vars, err := config.Vars(&gatewaySpec{})
		require.NoError(t, err)
		require.Equal(t, []string{
			"PULSE_DATABASE_URL",
			"PULSE_LEASE_TTL",
			"PULSE_GRPC_ADDR",
			"PULSE_MAX_STREAMS",
			"PULSE_VERBOSE",
		}, vars)
	})

	t.Run("AcceptsAStructValue", func(t *testing.T) {
		t.Parallel()
		vars, err := config.Vars(plainSpec{})
		require.NoError(t, err)
		require.Equal(t, []string{"PULSE_TOPIC"}, vars)
	})

	t.Run("RejectsANonStruct", func(t *testing.T) {
		t.Parallel()
		_, err := config.Vars("nope")
		require.Error(t, err)
	})
}

func TestOptionalDuration(t *testing.T) {
	type spec struct {
		Unit config.OptionalDuration `envconfig:"RETRY_BACKOFF_UNIT"`
		Max  config.OptionalDuration `envconfig:"RETRY_BACKOFF_MAX"`
	}
	t.Setenv("PULSE_RETRY_BACKOFF_UNIT", "0s")
	var s spec
	require.NoError(t, config.Load(&s))
	require.True(t, s.Unit.Set, "0s is a value, not unset")
	require.Equal(t, time.Duration(0), *s.Unit.Ptr())
	require.False(t, s.Max.Set)
	require.Nil(t, s.Max.Ptr())
	require.Equal(t, "unset", s.Max.String())

	t.Setenv("PULSE_RETRY_BACKOFF_MAX", "soon")
	err := config.Load(&spec{})
	var ce *config.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "PULSE_RETRY_BACKOFF_MAX", ce.Var)
	require.ErrorContains(t, err, `"soon" is not a duration`)
}
