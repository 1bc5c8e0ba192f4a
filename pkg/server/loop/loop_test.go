package loop_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/loop"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a loop body that records when it ran (bubble time since the
// start) and fails while told to.
type recorder struct {
	mu    sync.Mutex
	start time.Time
	runs  []time.Duration
	fail  bool
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

func (r *recorder) run(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, time.Since(r.start))
	if r.fail {
		return errors.New("database unreachable")
	}
	return nil
}

func (r *recorder) setFail(f bool) { r.mu.Lock(); r.fail = f; r.mu.Unlock() }

func (r *recorder) got() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.runs...)
}

// The loops run in a testing/synctest bubble: time moves only when every
// goroutine waits, by exactly what they wait for, so the tests assert the
// exact schedule, and "nothing more ran" is a fact at a point in time, not
// a sleep that hopes.

func TestLoop(t *testing.T) {
	t.Parallel()

	t.Run("RunsOnceAtStartThenEveryInterval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRecorder()
			l := loop.New(loop.Config{Name: "t", Interval: 10 * time.Second, Immediate: true}, r.run)
			require.NoError(t, l.Start(t.Context()))
			time.Sleep(35 * time.Second)
			require.NoError(t, l.Stop(t.Context()))
			require.Equal(t, []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second}, r.got())
		})
	})

	t.Run("NothingRunsBeforeTheFirstInterval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRecorder()
			l := loop.New(loop.Config{Name: "t", Interval: time.Second}, r.run)
			require.NoError(t, l.Start(t.Context()))
			time.Sleep(time.Second - time.Nanosecond)
			synctest.Wait()
			require.Empty(t, r.got())
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			require.Equal(t, []time.Duration{time.Second}, r.got())
			require.NoError(t, l.Stop(t.Context()))
		})
	})

	t.Run("BacksOffWhileFailingCountingAndLoggingEachFailure", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRecorder()
			r.setFail(true)
			reg := prometheus.NewRegistry()
			var logs bytes.Buffer
			l := loop.New(loop.Config{
				Name: "sweep", Interval: time.Second, Immediate: true, MaxBackoff: 4 * time.Second,
				Metrics: loop.NewMetrics(reg), Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			}, r.run)
			require.NoError(t, l.Start(t.Context()))
			// Runs at 0; failures wait 1, 2, 4, 4 s.
			time.Sleep(11 * time.Second)
			synctest.Wait()
			require.Equal(t, []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 11 * time.Second}, r.got())
			require.Equal(t, 5.0, testutil.ToFloat64(loop.NewMetrics(reg).Errors("sweep")), "one count per failure")
			require.Equal(t, 5, strings.Count(logs.String(), `"msg":"loop run failed; retrying"`), "one line per failure")
			require.Contains(t, logs.String(), `"loop":"sweep"`)

			// A success returns to the plain interval.
			r.setFail(false)
			time.Sleep(4 * time.Second) // the run at 15 s succeeds
			time.Sleep(time.Second)     // the next at 16 s
			synctest.Wait()
			got := r.got()
			require.Equal(t, []time.Duration{15 * time.Second, 16 * time.Second}, got[len(got)-2:])
			require.NoError(t, l.Stop(t.Context()))
		})
	})

	t.Run("JitterShortensEachWaitByAtMostItsFraction", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRecorder()
			l := loop.New(loop.Config{Name: "t", Interval: 10 * time.Second, Jitter: 0.5}, r.run)
			require.NoError(t, l.Start(t.Context()))
			time.Sleep(200 * time.Second)
			require.NoError(t, l.Stop(t.Context()))
			runs := r.got()
			require.GreaterOrEqual(t, len(runs), 20)
			prev := time.Duration(0)
			gaps := map[time.Duration]bool{}
			for _, at := range runs {
				gap := at - prev
				require.GreaterOrEqual(t, gap, 5*time.Second)
				require.LessOrEqual(t, gap, 10*time.Second)
				gaps[gap] = true
				prev = at
			}
			require.Greater(t, len(gaps), 1, "the waits vary")
		})
	})

	t.Run("StopEndsARunInFlightAndNothingRunsAfter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			started := make(chan struct{})
			var sawCancel bool
			l := loop.New(loop.Config{Name: "t", Interval: time.Second, Immediate: true, Metrics: loop.NewMetrics(reg)},
				func(ctx context.Context) error {
					close(started)
					<-ctx.Done()
					sawCancel = true
					return ctx.Err()
				})
			require.NoError(t, l.Start(t.Context()))
			<-started
			require.NoError(t, l.Stop(t.Context()))
			require.True(t, sawCancel)
			require.Zero(t, testutil.ToFloat64(loop.NewMetrics(reg).Errors("t")), "the stop is not a failure")
			time.Sleep(time.Hour)
			synctest.Wait() // would panic closing started twice had it run again
		})
	})

	t.Run("StopBeforeStartAndTwiceIsHarmless", func(t *testing.T) {
		t.Parallel()
		l := loop.New(loop.Config{Name: "t", Interval: time.Second}, func(context.Context) error { return nil })
		require.NoError(t, l.Stop(t.Context()))
		require.NoError(t, l.Start(t.Context()))
		require.NoError(t, l.Stop(t.Context()))
		require.NoError(t, l.Stop(t.Context()))
	})

	t.Run("StopGivesUpWhenItsContextEnds", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			release := make(chan struct{})
			l := loop.New(loop.Config{Name: "t", Interval: time.Second, Immediate: true},
				func(context.Context) error { <-release; return nil }) // ignores its context
			require.NoError(t, l.Start(t.Context()))
			synctest.Wait()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			require.ErrorIs(t, l.Stop(ctx), context.DeadlineExceeded)
			close(release)
		})
	})
}
