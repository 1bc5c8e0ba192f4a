package pulsetest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetest"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

type signupArgs struct {
	Email string `json:"email"`
}

type ctxKey struct{}

func TestWork(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("CompletesAndShowsTheJobTheHandlerSaw", func(t *testing.T) {
		t.Parallel()
		res := pulsetest.Work(ctx, t, pulse.HandlerFor(func(context.Context, *pulse.Job, signupArgs) error { return nil }),
			signupArgs{Email: "a@example.com"},
			pulsetest.WithTopic("signup.welcome"), pulsetest.WithAttempt(3),
			pulsetest.WithEnqueueOptions(pulse.MaxAttempts(4), pulse.Priority(9)))
		res.RequireCompleted(t)
		require.True(t, res.Completed())
		require.Empty(t, res.Error)
		require.NoError(t, res.Err)
		require.False(t, res.Panicked)
		require.Equal(t, "signup.welcome", res.Job.Topic)
		require.Equal(t, 3, res.Job.Attempt)
		require.Equal(t, 3, res.Attempt)
		require.Equal(t, 4, res.Job.MaxAttempts)
		require.Equal(t, 9, res.Job.Priority)
		require.JSONEq(t, `{"email":"a@example.com"}`, string(res.Job.Args))
	})

	t.Run("DefaultsAreTheServers", func(t *testing.T) {
		t.Parallel()
		res := pulsetest.Work(ctx, t, func(context.Context, *pulse.Job) error { return nil }, nil)
		res.RequireCompleted(t)
		require.Equal(t, pulsetest.DefaultTopic, res.Job.Topic)
		require.Equal(t, pulsetype.DefaultPriority, res.Job.Priority)
		require.Equal(t, pulsetype.DefaultMaxAttempts, res.Job.MaxAttempts)
		require.Equal(t, `{}`, string(res.Job.Args))
		require.Zero(t, res.Job.Timeout)
	})

	t.Run("TheHandlersResultAndProgressAreSeen", func(t *testing.T) {
		t.Parallel()
		res := pulsetest.Work(ctx, t, func(ctx context.Context, job *pulse.Job) error {
			if err := job.SetProgress(ctx, 50); err != nil {
				return err
			}
			if err := job.SetMetadata(ctx, map[string]any{"stage": "send"}); err != nil {
				return err
			}
			return job.SetResult(map[string]string{"message_id": "m-1"})
		}, nil)
		res.RequireCompleted(t)
		require.JSONEq(t, `{"message_id": "m-1"}`, string(res.Output))
	})

	t.Run("AFailureKeepsTheHandlersError", func(t *testing.T) {
		t.Parallel()
		errSMTP := errors.New("smtp down")
		res := pulsetest.Work(ctx, t, func(context.Context, *pulse.Job) error { return errSMTP }, nil)
		require.Equal(t, "smtp down", res.RequireFailed(t))
		require.ErrorIs(t, res.Err, errSMTP)
		require.Zero(t, res.RetryAfter)
	})

	t.Run("PermanentDeadLetters", func(t *testing.T) {
		t.Parallel()
		res := pulsetest.Work(ctx, t, func(context.Context, *pulse.Job) error { return pulse.Permanent(errors.New("no such user")) }, nil)
		require.Equal(t, "no such user", res.RequirePermanent(t))
		require.True(t, pulse.IsPermanent(res.Err))
	})

	t.Run("RetryAfterIsReported", func(t *testing.T) {
		t.Parallel()
		res := pulsetest.Work(ctx, t, func(context.Context, *pulse.Job) error {
			return pulse.RetryAfter(90*time.Second, errors.New("rate limited"))
		}, nil)
		require.Equal(t, "rate limited", res.RequireFailed(t))
		require.Equal(t, 90*time.Second, res.RetryAfter)
	})

	t.Run("ASnoozeIsReported", func(t *testing.T) {
		t.Parallel()
		res := pulsetest.Work(ctx, t, func(context.Context, *pulse.Job) error { return pulse.Snooze(time.Minute) }, nil)
		require.Equal(t, time.Minute, res.RequireSnoozed(t))
		require.Empty(t, res.Error, "a snooze is not a failure")
		require.False(t, res.Completed())
		d, ok := pulse.SnoozeOf(res.Err)
		require.True(t, ok)
		require.Equal(t, time.Minute, d)
	})

	t.Run("APanicFailsTheAttempt", func(t *testing.T) {
		t.Parallel()
		res := pulsetest.Work(ctx, t, func(context.Context, *pulse.Job) error { panic("boom") }, nil)
		require.Equal(t, "panic: boom", res.RequireFailed(t))
		require.True(t, res.Panicked)
		require.NoError(t, res.Err)
	})

	t.Run("TheJobsTimeoutIsTheDeadline", func(t *testing.T) {
		t.Parallel()
		res := pulsetest.Work(ctx, t, func(ctx context.Context, _ *pulse.Job) error {
			<-ctx.Done()
			return ctx.Err()
		}, nil, pulsetest.WithEnqueueOptions(pulse.Timeout(pulse.MinTimeout)))
		require.Equal(t, "timed out after 1s", res.RequireFailed(t))
		require.ErrorIs(t, res.Err, context.DeadlineExceeded)
		require.Equal(t, pulse.MinTimeout, res.Job.Timeout)
	})

	t.Run("TheTopicsTimeoutAppliesWithoutTheJobs", func(t *testing.T) {
		t.Parallel()
		res := pulsetest.Work(ctx, t, func(ctx context.Context, job *pulse.Job) error {
			if _, ok := ctx.Deadline(); !ok {
				return errors.New("no deadline")
			}
			return nil
		}, nil, pulsetest.WithRegisterOptions(pulse.WithTimeout(time.Minute)))
		res.RequireCompleted(t)
		require.Equal(t, time.Minute, res.Job.Timeout)
	})

	t.Run("ArgsOfTheWrongShapeFailPermanently", func(t *testing.T) {
		t.Parallel()
		called := false
		res := pulsetest.Work(ctx, t, pulse.HandlerFor(func(context.Context, *pulse.Job, signupArgs) error {
			called = true
			return nil
		}), []byte(`{"email":42}`), pulsetest.WithJobID("job-7"), pulsetest.WithTopic("signup.welcome"))
		msg := res.RequirePermanent(t)
		require.Contains(t, msg, "args of job job-7 (topic signup.welcome) do not decode into pulsetest_test.signupArgs")
		var ae *pulse.ArgsError
		require.ErrorAs(t, res.Err, &ae)
		require.False(t, called)
	})

	t.Run("MiddlewareAndContextValuesWrapTheHandler", func(t *testing.T) {
		t.Parallel()
		var order []string
		mw := func(name string) pulse.Middleware {
			return func(next pulse.Handler) pulse.Handler {
				return func(ctx context.Context, job *pulse.Job) error {
					order = append(order, name)
					return next(ctx, job)
				}
			}
		}
		vctx := context.WithValue(ctx, ctxKey{}, "tenant-1")
		res := pulsetest.Work(vctx, t, func(ctx context.Context, job *pulse.Job) error {
			order = append(order, "handler:"+ctx.Value(ctxKey{}).(string))
			if j, ok := pulse.JobFromContext(ctx); !ok || j != job {
				return errors.New("the job is not in the context")
			}
			return nil
		}, nil, pulsetest.WithMiddleware(mw("outer"), mw("inner")))
		res.RequireCompleted(t)
		require.Equal(t, []string{"outer", "inner", "handler:tenant-1"}, order)
	})

	t.Run("LongAndBrokenErrorTextIsReportedAsStored", func(t *testing.T) {
		t.Parallel()
		res := pulsetest.Work(ctx, t, func(context.Context, *pulse.Job) error {
			return errors.New("bad\x00byte\xff" + strings.Repeat("x", 10000))
		}, nil)
		msg := res.RequireFailed(t)
		require.True(t, strings.HasPrefix(msg, "bad\uFFFDbyte\uFFFD"), msg[:20])
		require.LessOrEqual(t, len(msg), pulsetype.MaxReportedErrorBytes)
	})
}

func TestWorkFailsTheTestOnAJobTheClientWouldRefuse(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, *pulse.Job) error { return nil }
	for name, run := range map[string]func(t testing.TB){
		"bad topic": func(t testing.TB) {
			pulsetest.Work(context.Background(), t, noop, nil, pulsetest.WithTopic("bad topic"))
		},
		"args not JSON": func(t testing.TB) { pulsetest.Work(context.Background(), t, noop, func() {}) },
		"priority": func(t testing.TB) {
			pulsetest.Work(context.Background(), t, noop, nil, pulsetest.WithEnqueueOptions(pulse.Priority(11)))
		},
		"attempt 0":   func(t testing.TB) { pulsetest.Work(context.Background(), t, noop, nil, pulsetest.WithAttempt(0)) },
		"nil handler": func(t testing.TB) { pulsetest.Work(context.Background(), t, nil, nil) },
		"canceled context": func(t testing.TB) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			pulsetest.Work(ctx, t, noop, nil)
		},
	} {
		require.NotEmpty(t, failure(run), name)
	}
	require.Contains(t, failure(func(t testing.TB) {
		pulsetest.Work(context.Background(), t, noop, nil, pulsetest.WithTopic("bad topic"))
	}), `topic "bad topic" has characters outside`)
}
