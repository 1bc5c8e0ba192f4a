package pulse

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

func TestWorkerUse(t *testing.T) {
	t.Parallel()

	t.Run("WrapsEveryHandlerOutermostFirst", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		var mu sync.Mutex
		var trace []string
		note := func(s string) {
			mu.Lock()
			trace = append(trace, s)
			mu.Unlock()
		}
		named := func(name string) Middleware {
			return func(next Handler) Handler {
				return func(ctx context.Context, job *Job) error {
					inCtx, _ := JobFromContext(ctx)
					note(fmt.Sprintf("%s>%s:%t", name, job.Topic, inCtx == job))
					err := next(ctx, job)
					note(name + "<")
					return err
				}
			}
		}
		registerWorker(t, []string{gw.Addr()}, func(w *Worker) {
			w.Register("a", func(context.Context, *Job) error { note("handler"); return nil })
			w.Use(named("outer"), named("middle"))
			w.Use(named("inner"))
			w.Register("b", func(context.Context, *Job) error { return errors.New("b failed") })
		})
		stream := gw.NextStream(t)
		stream.Assign(fakegateway.Assignment("job-a", "a"))
		require.Equal(t, pulsev1.Outcome_OUTCOME_COMPLETE, gw.NextResult(t).GetOutcome())
		mu.Lock()
		require.Equal(t, []string{"outer>a:true", "middle>a:true", "inner>a:true", "handler", "inner<", "middle<", "outer<"}, trace)
		mu.Unlock()

		stream.Assign(fakegateway.Assignment("job-b", "b"))
		res := gw.NextResult(t)
		require.Equal(t, "b failed", res.GetError())
	})

	t.Run("MiddlewareDecidesTheResultAndItsPanicIsRecovered", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		registerWorker(t, []string{gw.Addr()}, func(w *Worker) {
			w.Use(func(next Handler) Handler {
				return func(ctx context.Context, job *Job) error {
					switch job.ID {
					case "job-panic":
						panic("middleware bug")
					case "job-permanent":
						return Permanent(next(ctx, job))
					}
					return next(ctx, job)
				}
			})
			w.Register("t", func(context.Context, *Job) error { return errors.New("nope") })
		})
		stream := gw.NextStream(t)
		stream.Assign(fakegateway.Assignment("job-panic", "t"))
		res := gw.NextResult(t)
		require.Equal(t, pulsev1.Outcome_OUTCOME_FAIL, res.GetOutcome())
		require.Equal(t, "panic: middleware bug", res.GetError())
		stream.Assign(fakegateway.Assignment("job-permanent", "t"))
		res = gw.NextResult(t)
		require.Equal(t, pulsev1.Outcome_OUTCOME_FAIL_PERMANENT, res.GetOutcome())
	})

	t.Run("MisuseIsRefused", func(t *testing.T) {
		t.Parallel()
		w, err := NewWorker([]string{"localhost:1"})
		require.NoError(t, err)
		require.Panics(t, func() { w.Use(nil) })
		w.Use(func(Handler) Handler { return nil })
		w.Register("t", noop)
		require.ErrorContains(t, w.Run(t.Context()), "returned a nil handler")
		require.Panics(t, func() { w.Use(func(h Handler) Handler { return h }) }, "after Run started")
	})
}

func TestEnqueueInterceptor(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, opts ...ClientOption) (*fakeControl, *Client) {
		t.Helper()
		control := newFakeControl(t, &pulsev1.Job{Id: "job-1"})
		client, err := NewClient(control.addr, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, client.Close()) })
		return control, client
	}
	type tenantKey struct{}

	t.Run("WrapsEnqueueOutermostFirstAndMayChangeTheJob", func(t *testing.T) {
		t.Parallel()
		var order []string
		tag := func(name string) EnqueueInterceptor {
			return func(ctx context.Context, req *JobRequest, next EnqueueFunc) (Submitted, error) {
				order = append(order, name+">")
				s, err := next(ctx, req)
				order = append(order, name+"<"+s.ID)
				return s, err
			}
		}
		tenant := func(ctx context.Context, req *JobRequest, next EnqueueFunc) (Submitted, error) {
			if id, ok := ctx.Value(tenantKey{}).(string); ok {
				req.Topic = id + "." + req.Topic
				req.Options = append(req.Options, Priority(9), Timeout(30*time.Second))
			}
			return next(ctx, req)
		}
		control, client := setup(t, WithEnqueueInterceptor(tag("a"), tag("b")), WithEnqueueInterceptor(tenant))
		ctx := context.WithValue(t.Context(), tenantKey{}, "acme")
		s, err := client.Enqueue(ctx, "email.send", nil, Priority(1))
		require.NoError(t, err)
		require.Equal(t, "job-1", s.ID)
		require.Equal(t, []string{"a>", "b>", "b<job-1", "a<job-1"}, order)
		sent := control.recorded().submitted[0]
		require.Equal(t, "acme.email.send", sent.GetTopic())
		require.EqualValues(t, 9, sent.GetPriority(), "the option appended last wins")
		require.Equal(t, 30*time.Second, sent.GetTimeout().AsDuration())
	})

	t.Run("CanRefuseOrAnswerWithoutSending", func(t *testing.T) {
		t.Parallel()
		refuse := func(ctx context.Context, req *JobRequest, next EnqueueFunc) (Submitted, error) {
			switch req.Topic {
			case "forbidden":
				return Submitted{}, errors.New("not allowed")
			case "cached":
				return Submitted{ID: "from-cache", Duplicate: true}, nil
			}
			return next(ctx, req)
		}
		control, client := setup(t, WithEnqueueInterceptor(refuse))
		_, err := client.Enqueue(t.Context(), "forbidden", nil)
		require.ErrorContains(t, err, "not allowed")
		s, err := client.Enqueue(t.Context(), "cached", nil)
		require.NoError(t, err)
		require.Equal(t, Submitted{ID: "from-cache", Duplicate: true}, s)
		require.Empty(t, control.recorded().submitted)

		// In a batch, a refusal sends nothing at all.
		_, err = client.EnqueueMany(t.Context(), []JobRequest{{Topic: "ok"}, {Topic: "forbidden"}, {Topic: "ok"}})
		require.ErrorContains(t, err, "job 1: not allowed")
		require.Empty(t, control.recorded().batches)

		// An answered job stays out of the batch; the rest go in one RPC.
		out, err := client.EnqueueMany(t.Context(), []JobRequest{{Topic: "ok.1"}, {Topic: "cached"}, {Topic: "ok.2"}})
		require.NoError(t, err)
		require.Equal(t, []Submitted{{ID: "job-a"}, {ID: "from-cache", Duplicate: true}, {ID: "job-b"}}, out)
		batches := control.recorded().batches
		require.Len(t, batches, 1)
		require.Len(t, batches[0], 2)
		require.Equal(t, "ok.1", batches[0][0].GetTopic())
		require.Equal(t, "ok.2", batches[0][1].GetTopic())
	})

	t.Run("SeesEveryJobOfABatchWithItsOwnResult", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		seen := map[string]string{}
		record := func(ctx context.Context, req *JobRequest, next EnqueueFunc) (Submitted, error) {
			req.Options = append(req.Options, UniqueFor(time.Hour))
			s, err := next(ctx, req)
			mu.Lock()
			seen[req.Topic] = s.ID
			mu.Unlock()
			return s, err
		}
		control, client := setup(t, WithEnqueueInterceptor(record))
		out, err := client.EnqueueMany(t.Context(), []JobRequest{{Topic: "t.0"}, {Topic: "t.1"}, {Topic: "t.2"}})
		require.NoError(t, err)
		require.Len(t, out, 3)
		require.Equal(t, map[string]string{"t.0": "job-a", "t.1": "job-b", "t.2": "job-c"}, seen)
		batch := control.recorded().batches[0]
		for i, spec := range batch {
			require.Equal(t, fmt.Sprintf("t.%d", i), spec.GetTopic(), "request order kept")
			require.Equal(t, time.Hour, spec.GetUniqueFor().AsDuration())
		}
	})

	t.Run("NextTwiceIsAnError", func(t *testing.T) {
		t.Parallel()
		twice := func(ctx context.Context, req *JobRequest, next EnqueueFunc) (Submitted, error) {
			if _, err := next(ctx, req); err != nil {
				return Submitted{}, err
			}
			return next(ctx, req)
		}
		control, client := setup(t, WithEnqueueInterceptor(twice))
		_, err := client.Enqueue(t.Context(), "t", nil)
		require.ErrorIs(t, err, errNextTwice)
		require.Len(t, control.recorded().submitted, 1)
	})

	t.Run("OptionsOutOfRangeFailBeforeAnyRPC", func(t *testing.T) {
		t.Parallel()
		control, client := setup(t)
		for _, opt := range []EnqueueOption{Timeout(0), Timeout(25 * time.Hour), Timeout(-time.Second), UniqueFor(time.Millisecond), UniqueFor(400 * 24 * time.Hour), Timeout(time.Second + time.Nanosecond)} {
			_, err := client.Enqueue(t.Context(), "t", nil, opt)
			require.Error(t, err)
		}
		require.Empty(t, control.recorded().submitted)
	})
}
