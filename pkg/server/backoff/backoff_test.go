package backoff_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/backoff"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPolicy(t *testing.T) {
	t.Parallel()

	t.Run("DoublesFromInitialUpToMax", func(t *testing.T) {
		t.Parallel()
		p := backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
		want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
		for i, w := range want {
			require.Equal(t, w*time.Millisecond, p.Delay(i+1), "attempt %d", i+1)
		}
		require.Equal(t, 5*time.Second, p.Delay(10_000), "no overflow far past the cap")
	})

	t.Run("UsesTheMultiplier", func(t *testing.T) {
		t.Parallel()
		p := backoff.Policy{Initial: time.Second, Max: time.Minute, Multiplier: 3}
		require.Equal(t, 9*time.Second, p.Delay(3))
	})

	t.Run("WithoutAMaxStaysAtInitial", func(t *testing.T) {
		t.Parallel()
		p := backoff.Policy{Initial: time.Second}
		require.Equal(t, time.Second, p.Delay(5))
	})

	t.Run("JitterOnlyShortensAndNeverPassesTheCap", func(t *testing.T) {
		t.Parallel()
		p := backoff.Policy{Initial: time.Second, Max: 4 * time.Second, Jitter: 0.25}
		seen := map[time.Duration]bool{}
		for range 1000 {
			d := p.Delay(3)
			require.GreaterOrEqual(t, d, 3*time.Second)
			require.LessOrEqual(t, d, 4*time.Second)
			seen[d] = true
		}
		require.Greater(t, len(seen), 1, "jitter varies the delay")
	})
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := backoff.New(backoff.Policy{Initial: time.Second, Max: 10 * time.Second})
	require.Equal(t, time.Second, b.Next())
	require.Equal(t, 2*time.Second, b.Next())
	require.Equal(t, 2, b.Failures())
	b.Reset()
	require.Equal(t, 0, b.Failures())
	require.Equal(t, time.Second, b.Next(), "a reset starts over")
}

func TestSleep(t *testing.T) {
	t.Parallel()

	t.Run("WaitsTheDelayExactly", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			require.NoError(t, backoff.Sleep(t.Context(), 3*time.Second))
			require.Equal(t, 3*time.Second, time.Since(start))
		})
	})

	t.Run("ReturnsWhenTheContextEnds", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			require.ErrorIs(t, backoff.Sleep(ctx, time.Hour), context.DeadlineExceeded)
			require.Equal(t, time.Second, time.Since(start))
		})
	})
}
