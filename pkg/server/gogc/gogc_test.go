package gogc_test

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/gogc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Not parallel: the GC target is process-wide state; each case restores it.
func TestApply(t *testing.T) {
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	current := func() int {
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		return p
	}

	t.Run("SetsTheTargetWhenGOGCIsUnset", func(t *testing.T) {
		before := debug.SetGCPercent(100)
		t.Cleanup(func() { debug.SetGCPercent(before) })
		require.True(t, gogc.Apply(env(nil), gogc.ServiceDefault))
		require.Equal(t, gogc.ServiceDefault, current())
	})

	t.Run("LeavesAnOperatorsGOGCAlone", func(t *testing.T) {
		for _, v := range []string{"50", "off", ""} {
			before := debug.SetGCPercent(123)
			require.False(t, gogc.Apply(env(map[string]string{"GOGC": v}), gogc.ServiceDefault), "GOGC=%q", v)
			require.Equal(t, 123, current(), "GOGC=%q", v)
			debug.SetGCPercent(before)
		}
	})
}
