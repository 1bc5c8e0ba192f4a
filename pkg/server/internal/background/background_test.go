package background_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/internal/background"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type key struct{}

func TestRunner(t *testing.T) {
	t.Parallel()

	t.Run("RunsUntilStopKeepingValuesNotTheEnd", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var r background.Runner
			startCtx, cancelStart := context.WithCancel(context.WithValue(t.Context(), key{}, "v"))
			var got any
			stopped := false
			require.True(t, r.Start(startCtx, func(ctx context.Context) {
				got = ctx.Value(key{})
				<-ctx.Done()
				stopped = true
			}))
			require.False(t, r.Start(startCtx, func(context.Context) { t.Error("started twice") }))
			cancelStart() // the start-up context ending does not stop it
			synctest.Wait()
			require.False(t, stopped)
			require.NoError(t, r.Stop(t.Context()))
			require.True(t, stopped)
			require.Equal(t, "v", got)
			require.NoError(t, r.Stop(t.Context()), "twice")
		})
	})

	t.Run("StopWithoutStartReturns", func(t *testing.T) {
		t.Parallel()
		var r background.Runner
		require.NoError(t, r.Stop(t.Context()))
	})

	t.Run("StopGivesUpWithItsContext", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var r background.Runner
			release := make(chan struct{})
			r.Start(t.Context(), func(context.Context) { <-release })
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			require.ErrorIs(t, r.Stop(ctx), context.DeadlineExceeded)
			close(release)
		})
	})
}
