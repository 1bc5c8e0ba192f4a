package pulse

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

// registerWorker is startWorker for handlers registered with options.
func registerWorker(t *testing.T, targets []string, register func(w *Worker), opts ...WorkerOption) *runningWorker { //nolint:unparam // other tests reach the running worker
	t.Helper()
	opts = append([]WorkerOption{WithLogger(slog.New(slog.DiscardHandler)), WithWorkerID("worker-1")}, opts...)
	w, err := NewWorker(targets, opts...)
	require.NoError(t, err)
	register(w)
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningWorker{Worker: w, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { require.NoError(t, r.stop(t)) })
	return r
}

func timedAssignment(id string, timeout time.Duration) *pulsev1.Assignment {
	a := fakegateway.Assignment(id, "t")
	if timeout > 0 {
		a.Timeout = durationpb.New(timeout)
	}
	return a
}

func TestTimeout(t *testing.T) {
	t.Parallel()

	t.Run("TheHandlerSeesTheDeadlineAndAnOverrunFailsTheAttempt", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		type seen struct {
			timeout time.Duration
			left    time.Duration
			hasDL   bool
			cause   error
		}
		seenCh := make(chan seen, 1)
		registerWorker(t, []string{gw.Addr()}, func(w *Worker) {
			w.Register("t", func(ctx context.Context, job *Job) error {
				dl, ok := ctx.Deadline()
				s := seen{timeout: job.Timeout, left: time.Until(dl), hasDL: ok}
				<-ctx.Done()
				s.cause = context.Cause(ctx)
				seenCh <- s
				return ctx.Err()
			})
		})
		start := time.Now()
		gw.NextStream(t).Assign(timedAssignment("job-1", 100*time.Millisecond))
		res := gw.NextResult(t)
		s := <-seenCh
		require.True(t, s.hasDL)
		require.Equal(t, 100*time.Millisecond, s.timeout)
		require.LessOrEqual(t, s.left, 100*time.Millisecond)
		require.ErrorIs(t, s.cause, ErrJobTimedOut)
		require.Equal(t, pulsev1.Outcome_OUTCOME_FAIL, res.GetOutcome())
		require.Equal(t, "timed out after 100ms", res.GetError())
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	})

	t.Run("AHandlerThatFinishesLateStillFailsAndSaysWhatItReturned", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		registerWorker(t, []string{gw.Addr()}, func(w *Worker) {
			w.Register("t", func(ctx context.Context, job *Job) error {
				<-ctx.Done()
				if job.ID == "job-nil" {
					return nil // finished, but after its deadline
				}
				return errors.New("smtp: connection reset")
			})
		})
		stream := gw.NextStream(t)
		stream.Assign(timedAssignment("job-nil", 20*time.Millisecond))
		res := gw.NextResult(t)
		require.Equal(t, pulsev1.Outcome_OUTCOME_FAIL, res.GetOutcome())
		require.Equal(t, "timed out after 20ms", res.GetError())
		stream.Assign(timedAssignment("job-err", 20*time.Millisecond))
		res = gw.NextResult(t)
		require.Equal(t, "timed out after 20ms: smtp: connection reset", res.GetError())
	})

	t.Run("AHandlerThatIgnoresItsContextFailsAfterTheGraceAndKeepsItsSlot", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		release := make(chan struct{})
		returned := make(chan time.Time, 1)
		registerWorker(t, []string{gw.Addr()}, func(w *Worker) {
			w.Register("t", func(context.Context, *Job) error {
				<-release // ignores its context
				returned <- time.Now()
				return nil
			})
		}, WithConcurrency(1))
		stream := gw.NextStream(t)
		start := time.Now()
		stream.Assign(timedAssignment("job-stuck", 50*time.Millisecond))
		res := gw.NextResult(t)
		require.Equal(t, pulsev1.Outcome_OUTCOME_FAIL, res.GetOutcome())
		require.Equal(t, "timed out after 50ms", res.GetError())
		require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond+timeoutGrace)

		// Reported, but the handler still runs: no credit until it returns.
		select {
		case n := <-stream.Credits():
			t.Fatalf("credited %d slot(s) while the handler still runs", n)
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		<-returned
		stream.AwaitCredits(t, 1)
	})

	t.Run("TheTopicDefaultAppliesUnlessTheJobHasItsOwn", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		seen := make(chan time.Duration, 2)
		registerWorker(t, []string{gw.Addr()}, func(w *Worker) {
			w.Register("t", func(ctx context.Context, job *Job) error {
				seen <- job.Timeout
				return nil
			}, WithTimeout(time.Minute))
		})
		stream := gw.NextStream(t)
		stream.Assign(timedAssignment("job-default", 0))
		require.Equal(t, time.Minute, <-seen)
		stream.Assign(timedAssignment("job-own", 2*time.Second))
		require.Equal(t, 2*time.Second, <-seen)
		for range 2 {
			require.Equal(t, pulsev1.Outcome_OUTCOME_COMPLETE, gw.NextResult(t).GetOutcome())
		}
	})

	t.Run("WithoutATimeoutNothingChanges", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		hasDeadline := make(chan bool, 1)
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": func(ctx context.Context, job *Job) error {
			_, ok := ctx.Deadline()
			hasDeadline <- ok
			return nil
		}})
		gw.NextStream(t).Assign(timedAssignment("job-1", 0))
		require.False(t, <-hasDeadline)
		require.Equal(t, pulsev1.Outcome_OUTCOME_COMPLETE, gw.NextResult(t).GetOutcome())
	})

	t.Run("RegisterRefusesATimeoutOutOfRange", func(t *testing.T) {
		t.Parallel()
		w, err := NewWorker([]string{"localhost:1"})
		require.NoError(t, err)
		for _, d := range []time.Duration{-time.Second, 0, time.Millisecond, 25 * time.Hour} {
			require.Panics(t, func() { w.Register("t", noop, WithTimeout(d)) }, "%s", d)
		}
	})

	t.Run("TimeoutErrorReadsAsItSays", func(t *testing.T) {
		t.Parallel()
		err := error(&TimeoutError{Timeout: 30 * time.Second})
		require.Equal(t, "timed out after 30s", err.Error())
		require.ErrorIs(t, err, ErrJobTimedOut)
		require.False(t, IsPermanent(err))
		perm := &TimeoutError{Timeout: time.Second, Err: Permanent(errors.New("bad input"))}
		require.True(t, IsPermanent(perm), "a handler's Permanent survives the timeout")
	})
}
