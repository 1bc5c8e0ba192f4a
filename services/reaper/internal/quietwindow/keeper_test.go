package quietwindow_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/services/reaper/internal/quietwindow"
)

// fakeStore answers as a database with a vacuum of jobs truncating while
// truncating is set; windows records every window the keeper opened.
type fakeStore struct {
	truncating bool
	windows    []time.Duration
}

func (f *fakeStore) VacuumTruncating(context.Context) (bool, error) { return f.truncating, nil }

func (f *fakeStore) QuietWindow(_ context.Context, lockTimeout, hold, poll time.Duration) (jobstore.Window, error) {
	f.windows = append(f.windows, hold)
	return jobstore.Window{Closed: true, Held: poll, VacuumDone: true}, nil
}

type observer struct{ windows []jobstore.Window }

func (o *observer) QuietWindow(w jobstore.Window, err error) { o.windows = append(o.windows, w) }

func TestKeeper(t *testing.T) {
	t.Parallel()
	setup := func() (*fakeStore, *observer, *quietwindow.Keeper) {
		st, o := &fakeStore{}, &observer{}
		return st, o, quietwindow.NewKeeper(200*time.Millisecond, st, o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}

	t.Run("OpensAWindowOnlyWhileAVacuumTruncates", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			st, o, k := setup()
			require.NoError(t, k.Tick(t.Context()))
			require.Empty(t, st.windows)
			st.truncating = true
			require.NoError(t, k.Tick(t.Context()))
			require.Equal(t, []time.Duration{200 * time.Millisecond}, st.windows, "the window's bound is the configured one")
			require.Len(t, o.windows, 1)
		})
	})

	t.Run("LeavesTheQueueAGapBetweenTwoWindows", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			st, _, k := setup()
			st.truncating = true
			require.NoError(t, k.Tick(t.Context()))
			first := time.Now()
			for len(st.windows) < 2 {
				time.Sleep(quietwindow.Look)
				require.NoError(t, k.Tick(t.Context()))
			}
			require.GreaterOrEqual(t, time.Since(first), quietwindow.Gap, "the second window came too soon")
			require.Less(t, time.Since(first), quietwindow.Gap+quietwindow.Look, "the second window waited past the gap")
		})
	})
}
