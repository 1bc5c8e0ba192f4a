package pauseexpiry_test

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/pauseexpiry"
)

func TestSweeper(t *testing.T) {
	t.Parallel()

	t.Run("ResumesAnExpiredPauseOnceAsTheSystem", func(t *testing.T) {
		t.Parallel()
		store := jobstore.New(pgtest.Pool(t))
		t.Cleanup(func() { _ = store.Close() })
		m := api.NewMetrics(prometheus.NewRegistry())
		logger := slog.New(slog.NewTextHandler(io.Discard, nil))
		ctx := t.Context()
		soon := time.Now().Add(50 * time.Millisecond)
		_, err := store.Pause(ctx, jobstore.PauseRequest{Scope: jobstore.GlobalScope, Mode: jobstore.PauseDrain, Reason: "forgotten", Actor: "alice", Until: &soon})
		require.NoError(t, err)

		// Two replicas sweep at the same moments, as their loops would,
		// until the pause has expired.
		a := pauseexpiry.New(store, m, logger)
		b := pauseexpiry.New(store, m, logger)
		require.Eventually(t, func() bool {
			var wg sync.WaitGroup
			for _, s := range []*pauseexpiry.Sweeper{a, b} {
				wg.Go(func() { assert.NoError(t, s.Sweep(ctx)) }) //nolint:forbidigo // require must not stop the test from another goroutine
			}
			wg.Wait()
			st, err := store.DispatchState(ctx)
			return err == nil && !st.Scope(jobstore.GlobalScope).Paused
		}, 10*time.Second, 5*time.Millisecond)

		evs, err := store.ListControlEvents(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, evs, 2)
		require.Equal(t, jobstore.ActionResume, evs[0].Action)
		require.Equal(t, jobstore.SystemActor, evs[0].Actor)
		require.Equal(t, 0.0, testutil.ToFloat64(m.DispatchPaused.WithLabelValues(jobstore.GlobalScope)))
		require.Equal(t, 1.0, testutil.ToFloat64(m.DispatchActions.WithLabelValues("auto_resume")))
	})

	t.Run("LeavesAPauseWithoutExpiryAlone", func(t *testing.T) {
		t.Parallel()
		store := jobstore.New(pgtest.Pool(t))
		t.Cleanup(func() { _ = store.Close() })
		ctx := t.Context()
		_, err := store.Pause(ctx, jobstore.PauseRequest{Scope: "mail", Mode: jobstore.PauseDrain, Reason: "indefinite", Actor: "alice"})
		require.NoError(t, err)
		s := pauseexpiry.New(store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		require.NoError(t, s.Sweep(ctx))
		st, err := store.DispatchState(ctx)
		require.NoError(t, err)
		require.True(t, st.Scope("mail").Paused)
	})
}
