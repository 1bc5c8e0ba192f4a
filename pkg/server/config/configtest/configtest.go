// Package configtest is what a service's configuration tests share: an
// environment holding only what the test sets, and the check that a bad
// value is refused with an error naming its variable.
package configtest

import (
	"os"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/config"
)

// Env unsets every variable spec reads, so the test sees spec's defaults
// whatever the machine's environment holds, then sets the name, value
// pairs given. Everything is restored when the test ends (t.Setenv), so a
// test that calls it cannot run in parallel.
func Env(t testing.TB, spec any, pairs ...string) {
	t.Helper()
	require.Zero(t, len(pairs)%2, "Env takes name, value pairs")
	vars, err := config.Vars(spec)
	require.NoError(t, err)
	for _, v := range vars {
		t.Setenv(v, "")
		require.NoError(t, os.Unsetenv(v))
	}
	for i := 0; i < len(pairs); i += 2 {
		t.Setenv(pairs[i], pairs[i+1])
	}
}

// RequireRefused sets envVar to value (unsets it when value is empty) on
// top of the environment the test holds, and requires that loading a
// fresh spec of the same type fails with a *config.Error naming envVar.
func RequireRefused(t testing.TB, spec any, envVar, value string) {
	t.Helper()
	if value == "" {
		t.Setenv(envVar, "")
		require.NoError(t, os.Unsetenv(envVar))
	} else {
		t.Setenv(envVar, value)
	}
	typ := reflect.TypeOf(spec)
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	err := config.Load(reflect.New(typ).Interface())
	var ce *config.Error
	require.ErrorAs(t, err, &ce, "%s=%q is refused", envVar, value)
	require.Equal(t, envVar, ce.Var, "%s=%q: the error names the variable: %v", envVar, value, err)
}
