package pulse

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

func TestBackoffOptions(t *testing.T) {
	t.Parallel()

	t.Run("TheSpecCarriesTheJobsOwnBackoff", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			opts []EnqueueOption
			want *pulsev1.RetryPolicy
		}{
			{nil, nil},
			{[]EnqueueOption{ExponentialBackoff(2*time.Second, 10*time.Minute)},
				&pulsev1.RetryPolicy{Base: durationpb.New(2 * time.Second), Max: durationpb.New(10 * time.Minute)}},
			{[]EnqueueOption{ExponentialBackoff(time.Second, 0)}, &pulsev1.RetryPolicy{Base: durationpb.New(time.Second)}},
			{[]EnqueueOption{FixedBackoff(30 * time.Second)}, &pulsev1.RetryPolicy{Fixed: durationpb.New(30 * time.Second)}},
			{[]EnqueueOption{FixedBackoff(time.Second), ExponentialBackoff(time.Second, time.Minute)}, // the last wins
				&pulsev1.RetryPolicy{Base: durationpb.New(time.Second), Max: durationpb.New(time.Minute)}},
		} {
			req := JobRequest{Topic: "t", Options: c.opts}
			spec, err := req.Spec()
			require.NoError(t, err)
			require.True(t, proto.Equal(c.want, spec.GetRetry()), "%v != %v", c.want, spec.GetRetry())
		}
	})

	t.Run("OutOfRangeFailsBeforeAnyRPC", func(t *testing.T) {
		t.Parallel()
		for name, o := range map[string]EnqueueOption{
			"zero base":        ExponentialBackoff(0, time.Minute),
			"negative base":    ExponentialBackoff(-time.Second, 0),
			"max below base":   ExponentialBackoff(time.Minute, time.Second),
			"max past 366d":    ExponentialBackoff(time.Second, 367*24*time.Hour),
			"sub-ms fixed":     FixedBackoff(time.Microsecond),
			"fixed past 366d":  FixedBackoff(367 * 24 * time.Hour),
			"finer than a µs":  FixedBackoff(time.Second + time.Nanosecond),
			"negative fixed":   FixedBackoff(-time.Second),
			"negative max set": ExponentialBackoff(time.Second, -time.Second),
		} {
			req := JobRequest{Topic: "t", Options: []EnqueueOption{o}}
			_, err := req.Spec()
			require.ErrorContains(t, err, "backoff", name)
		}
	})

	t.Run("JobInfoShowsIt", func(t *testing.T) {
		t.Parallel()
		info := jobInfoFromProto(&pulsev1.Job{Id: "j", Retry: &pulsev1.RetryPolicy{Base: durationpb.New(time.Second), Max: durationpb.New(time.Hour)}})
		require.Equal(t, RetryPolicy{Base: time.Second, Max: time.Hour}, info.Retry)
		require.Zero(t, jobInfoFromProto(&pulsev1.Job{Id: "j"}).Retry)
	})
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()

	t.Run("WrapsTheErrorAndCarriesTheWait", func(t *testing.T) {
		t.Parallel()
		base := errors.New("429 too many requests")
		err := RetryAfter(30*time.Second, base)
		require.ErrorIs(t, err, base)
		require.Equal(t, "429 too many requests", err.Error())
		d, ok := RetryAfterOf(err)
		require.True(t, ok)
		require.Equal(t, 30*time.Second, d)
		_, ok = RetryAfterOf(base)
		require.False(t, ok)

		d, ok = RetryAfterOf(RetryAfter(time.Minute, nil))
		require.True(t, ok)
		require.Equal(t, time.Minute, d)
		require.Equal(t, "retry requested after 1m0s", RetryAfter(time.Minute, nil).Error())
	})

	t.Run("TheWaitIsClampedToWhatTheServerAccepts", func(t *testing.T) {
		t.Parallel()
		for in, want := range map[time.Duration]time.Duration{
			-time.Second:            MinRetryDelay,
			0:                       MinRetryDelay,
			time.Second + 1:         time.Second + time.Microsecond,
			400 * 24 * time.Hour:    MaxRetryDelay,
			1500 * time.Millisecond: 1500 * time.Millisecond,
		} {
			d, _ := RetryAfterOf(RetryAfter(in, errors.New("x")))
			require.Equal(t, want, d, "%s", in)
		}
	})

	t.Run("TheWorkerReportsAFailureWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		for name, c := range map[string]struct {
			handler Handler
			outcome pulsev1.Outcome
			after   time.Duration
			text    string
		}{
			"retry after": {func(context.Context, *Job) error { return RetryAfter(45*time.Second, errors.New("rate limited")) },
				pulsev1.Outcome_OUTCOME_FAIL, 45 * time.Second, "rate limited"},
			"wrapped": {func(context.Context, *Job) error {
				return errors.Join(errors.New("call failed"), RetryAfter(time.Minute, errors.New("503")))
			}, pulsev1.Outcome_OUTCOME_FAIL, time.Minute, "call failed\n503"},
			"permanent wins": {func(context.Context, *Job) error {
				return Permanent(RetryAfter(time.Minute, errors.New("gone")))
			}, pulsev1.Outcome_OUTCOME_FAIL_PERMANENT, 0, "gone"},
			"plain failure": {func(context.Context, *Job) error { return errors.New("boom") },
				pulsev1.Outcome_OUTCOME_FAIL, 0, "boom"},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
				startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": c.handler})
				fs := gw.NextStream(t)
				fs.Assign(fakegateway.Assignment("job-1", "t"))
				res := gw.NextResult(t)
				require.Equal(t, c.outcome, res.GetOutcome())
				require.Equal(t, c.text, res.GetError())
				if c.after == 0 {
					require.Nil(t, res.GetRetryAfter())
				} else {
					require.Equal(t, c.after, res.GetRetryAfter().AsDuration())
				}
			})
		}
	})
}

func TestSnooze(t *testing.T) {
	t.Parallel()

	t.Run("TheWaitIsClampedToWhatTheServerAccepts", func(t *testing.T) {
		t.Parallel()
		for in, want := range map[time.Duration]time.Duration{
			-time.Second:         0,
			0:                    0,
			time.Second + 1:      time.Second + time.Microsecond,
			400 * 24 * time.Hour: MaxRetryDelay,
		} {
			d, ok := SnoozeOf(Snooze(in))
			require.True(t, ok)
			require.Equal(t, want, d, "%s", in)
		}
		_, ok := SnoozeOf(errors.New("x"))
		require.False(t, ok)
	})

	t.Run("TheWorkerReportsASnooze", func(t *testing.T) {
		t.Parallel()
		for name, c := range map[string]struct {
			handler Handler
			outcome pulsev1.Outcome
			after   time.Duration
		}{
			"snooze": {func(context.Context, *Job) error { return Snooze(time.Minute) }, pulsev1.Outcome_OUTCOME_SNOOZE, time.Minute},
			"zero":   {func(context.Context, *Job) error { return Snooze(0) }, pulsev1.Outcome_OUTCOME_SNOOZE, 0},
			"wrapped": {func(context.Context, *Job) error { return fmt.Errorf("upstream busy: %w", Snooze(time.Second)) },
				pulsev1.Outcome_OUTCOME_SNOOZE, time.Second},
			"permanent wins": {func(context.Context, *Job) error { return Permanent(Snooze(time.Second)) },
				pulsev1.Outcome_OUTCOME_FAIL_PERMANENT, -1},
			"retry after wins": {func(context.Context, *Job) error { return RetryAfter(time.Hour, Snooze(time.Second)) },
				pulsev1.Outcome_OUTCOME_FAIL, time.Hour},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
				startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": c.handler})
				fs := gw.NextStream(t)
				fs.Assign(fakegateway.Assignment("job-1", "t"))
				res := gw.NextResult(t)
				require.Equal(t, c.outcome, res.GetOutcome())
				if c.after < 0 {
					require.Nil(t, res.GetRetryAfter())
					return
				}
				require.NotNil(t, res.GetRetryAfter())
				require.Equal(t, c.after, res.GetRetryAfter().AsDuration())
				if c.outcome == pulsev1.Outcome_OUTCOME_SNOOZE {
					require.Empty(t, res.GetError(), "a snooze is not a failure")
				}
			})
		}
	})
}
