package clock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/services/reaper/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestManual(t *testing.T) {
	t.Parallel()

	t.Run("FiresATickerOnlyWhenItsIntervalHasPassed", func(t *testing.T) {
		t.Parallel()
		start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		c := clock.NewManual(start)
		tk := c.NewTicker(10 * time.Second)
		c.Advance(9 * time.Second)
		require.Empty(t, tk.C())
		c.Advance(time.Second)
		require.Equal(t, start.Add(10*time.Second), <-tk.C())
		require.Equal(t, start.Add(10*time.Second), c.Now())
	})

	t.Run("KeepsAtMostOnePendingTickAndNoneAfterStop", func(t *testing.T) {
		t.Parallel()
		c := clock.NewManual(time.Time{})
		tk := c.NewTicker(time.Second)
		c.Advance(time.Second)
		c.Advance(time.Second)
		require.Len(t, tk.C(), 1)
		<-tk.C()
		tk.Stop()
		c.Advance(time.Second)
		require.Empty(t, tk.C())
	})
}
