package pulse

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
)

func TestRunners(t *testing.T) {
	t.Parallel()

	t.Run("JobsOneAfterAnotherShareOneGoroutine", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRunners()
			ran := 0
			for range 100 {
				r.run(func() { ran++ })
				synctest.Wait() // the runner is idle again
			}
			require.Equal(t, 100, ran)
			require.Equal(t, int64(1), r.spawned.Load())
			r.stop()
		})
	})

	t.Run("RunnersAreAsManyAsJobsThatRanAtOnce", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRunners()
			for round := range 3 {
				gate := make(chan struct{})
				for range 5 {
					r.run(func() { <-gate })
				}
				synctest.Wait()
				require.Equal(t, int64(5), r.spawned.Load(), "round %d", round)
				close(gate)
				synctest.Wait()
			}
			r.stop()
		})
	})

	t.Run("StopEndsARunnerWhenItsJobReturns", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRunners()
			gate := make(chan struct{})
			finished := false
			r.run(func() { <-gate; finished = true })
			synctest.Wait()
			r.stop()
			r.stop() // twice is harmless
			close(gate)
			synctest.Wait()
			require.True(t, finished)
			// synctest.Test fails if any goroutine of the bubble outlives it.
		})
	})
}
