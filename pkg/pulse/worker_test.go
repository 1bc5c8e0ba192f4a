package pulse

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsequeue/pulse/pkg/errtext"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

// runningWorker is a worker whose Run is in progress in the background.
type runningWorker struct {
	*Worker
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// stop cancels Run's context and waits for it to return.
func (r *runningWorker) stop(t *testing.T) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(liveness):
			r.err = errors.New("worker did not stop")
		}
	})
	return r.err
}

// startWorker builds a worker for targets with handlers registered, runs it
// and stops it when the test ends (before the fake gateways stop).
func startWorker(t *testing.T, targets []string, handlers map[string]Handler, opts ...WorkerOption) *runningWorker {
	t.Helper()
	opts = append([]WorkerOption{WithLogger(slog.New(slog.DiscardHandler)), WithWorkerID("worker-1")}, opts...)
	w, err := NewWorker(targets, opts...)
	require.NoError(t, err)
	for topic, h := range handlers {
		w.Register(topic, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningWorker{Worker: w, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { require.NoError(t, r.stop(t)) })
	return r
}

// blockingHandler runs until release is closed or its context is canceled,
// announcing each start on started.
type blockingHandler struct {
	started chan string
	release chan struct{}
	causes  chan error // context.Cause when canceled
}

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{
		started: make(chan string, 100),
		release: make(chan struct{}),
		causes:  make(chan error, 100),
	}
}

func (b *blockingHandler) handle(ctx context.Context, job *Job) error {
	b.started <- job.ID
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		b.causes <- context.Cause(ctx)
		return ctx.Err()
	}
}

func (b *blockingHandler) awaitStart(t *testing.T) string {
	t.Helper()
	select {
	case id := <-b.started:
		return id
	case <-time.After(liveness):
		t.Fatal("handler did not start")
		return ""
	}
}

func (b *blockingHandler) awaitCause(t *testing.T) error {
	t.Helper()
	select {
	case err := <-b.causes:
		return err
	case <-time.After(liveness):
		t.Fatal("handler context was not canceled")
		return nil
	}
}

func noop(context.Context, *Job) error { return nil }

func TestWorker(t *testing.T) {
	t.Parallel()

	t.Run("OpensTheStreamWithItsTopicsAndConcurrency", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"sms.send": noop, "email.send": noop, "a.first": noop},
			WithConcurrency(7))

		open := gw.NextStream(t).Open
		require.Equal(t, "worker-1", open.GetWorkerId())
		require.Equal(t, []string{"a.first", "email.send", "sms.send"}, open.GetTopics())
		require.Equal(t, int32(7), open.GetConcurrency())
		require.Zero(t, open.GetInFlight())
	})

	t.Run("SendsBasicAuthOnTheStream", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": noop}, WithUserPass("worker", "pw"))

		want := "Basic " + base64.StdEncoding.EncodeToString([]byte("worker:pw"))
		require.Equal(t, []string{want}, gw.NextStream(t).MD.Get("authorization"))
	})

	t.Run("ReportsEachOutcome", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name        string
			handler     Handler
			wantOutcome pulsev1.Outcome
			wantError   string
		}{
			{"success completes", noop, pulsev1.Outcome_OUTCOME_COMPLETE, ""},
			{"error fails with its message", func(context.Context, *Job) error { return errors.New("smtp down") },
				pulsev1.Outcome_OUTCOME_FAIL, "smtp down"},
			{"permanent error dead-letters", func(context.Context, *Job) error { return Permanent(errors.New("bad address")) },
				pulsev1.Outcome_OUTCOME_FAIL_PERMANENT, "bad address"},
			{"panic fails with its value", func(context.Context, *Job) error { panic("boom") },
				pulsev1.Outcome_OUTCOME_FAIL, "panic: boom"},
			{"long error is cut on a character boundary and marked", func(context.Context, *Job) error { return errors.New(strings.Repeat("é", 3000)) },
				pulsev1.Outcome_OUTCOME_FAIL, strings.Repeat("é", (maxErrorBytes-len(errtext.TruncatedMark))/2) + errtext.TruncatedMark},
			{"NUL and invalid UTF-8 become U+FFFD", func(context.Context, *Job) error { return errors.New("bad\x00byte\xff") },
				pulsev1.Outcome_OUTCOME_FAIL, "bad\uFFFDbyte\uFFFD"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
				startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": c.handler})
				fs := gw.NextStream(t)
				fs.Assign(fakegateway.Assignment("job-1", "t"))

				res := gw.NextResult(t)
				require.Equal(t, "job-1", res.GetJobId())
				require.Equal(t, int32(1), res.GetAttempt())
				require.Equal(t, c.wantOutcome, res.GetOutcome())
				require.Equal(t, c.wantError, res.GetError())
				fs.AwaitCredits(t, 1)
			})
		}
	})

	t.Run("HandlerSeesTheJobItsArgsAndItsTraceContext", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		type seen struct {
			job     *Job
			fromCtx *Job
			args    map[string]int
			traceID string
		}
		seenCh := make(chan seen, 1)
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": func(ctx context.Context, job *Job) error {
			var s seen
			s.job = job
			s.fromCtx, _ = JobFromContext(ctx)
			if err := job.UnmarshalArgs(&s.args); err != nil {
				return err
			}
			s.traceID = trace.SpanContextFromContext(ctx).TraceID().String()
			seenCh <- s
			return nil
		}})
		a := fakegateway.Assignment("job-7", "t")
		a.Attempt, a.Priority, a.Args = 3, 8, []byte(`{"n":42}`)
		a.Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		gw.NextStream(t).Assign(a)

		s := <-seenCh
		got := *s.job
		require.NotNil(t, got.update, "the handler's job can report its progress")
		require.NotNil(t, got.parents, "the handler's job can read its parents")
		got.update, got.parents = nil, nil
		require.Equal(t, &Job{
			ID: "job-7", Attempt: 3, Topic: "t", Args: []byte(`{"n":42}`), Priority: 8, MaxAttempts: 5,
			SubmittedAt: a.GetSubmittedAt().AsTime(),
		}, &got)
		require.Same(t, s.job, s.fromCtx)
		require.Equal(t, map[string]int{"n": 42}, s.args)
		require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", s.traceID)
	})

	t.Run("CreditsMatchFinishedJobsAndConcurrencyHoldsWhenTheGatewayOversends", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		var current, peak atomic.Int32
		release := make(chan struct{})
		started := make(chan struct{}, 10)
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": func(ctx context.Context, _ *Job) error {
			n := current.Add(1)
			defer current.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			started <- struct{}{}
			<-release
			return nil
		}}, WithConcurrency(2))
		fs := gw.NextStream(t)
		fs.Assign(fakegateway.Assignment("j1", "t"), fakegateway.Assignment("j2", "t"), fakegateway.Assignment("j3", "t"))
		fs.Assign(fakegateway.Assignment("j4", "t"), fakegateway.Assignment("j5", "t"))

		for range 2 {
			select {
			case <-started:
			case <-time.After(liveness):
				t.Fatal("handlers did not start")
			}
		}
		close(release)
		got := map[string]pulsev1.Outcome{}
		for range 5 {
			r := gw.NextResult(t)
			got[r.GetJobId()] = r.GetOutcome()
		}
		for _, id := range []string{"j1", "j2", "j3", "j4", "j5"} {
			require.Equal(t, pulsev1.Outcome_OUTCOME_COMPLETE, got[id], id)
		}
		require.Equal(t, int32(2), peak.Load())
		fs.AwaitCredits(t, 5)
	})

	t.Run("HeartbeatsCarryEveryRunningJob", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		h := newBlockingHandler()
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": h.handle})
		fs := gw.NextStream(t)
		fs.Assign(fakegateway.Assignment("j1", "t"), fakegateway.Assignment("j2", "t"))
		h.awaitStart(t)
		h.awaitStart(t)

		require.Eventually(t, func() bool {
			hb := gw.LastHeartbeat()
			if hb == nil || hb.GetWorkerId() != "worker-1" || len(hb.GetJobs()) != 2 {
				return false
			}
			ids := map[string]int32{}
			for _, j := range hb.GetJobs() {
				ids[j.GetJobId()] = j.GetAttempt()
			}
			return ids["j1"] == 1 && ids["j2"] == 1
		}, liveness, tick)
		close(h.release)
		gw.NextResult(t)
		gw.NextResult(t)
	})

	t.Run("HeartbeatAnswersCancelHandlersWithTheRightCause", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name      string
			canceled  bool
			wantCause error
		}{
			{"lease lost", false, ErrLeaseLost},
			{"job canceled", true, ErrJobCanceled},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
				h := newBlockingHandler()
				startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": h.handle})
				fs := gw.NextStream(t)
				fs.Assign(fakegateway.Assignment("doomed", "t"), fakegateway.Assignment("fine", "t"))
				h.awaitStart(t)
				h.awaitStart(t)

				gw.SetHeartbeatFn(func(req *pulsev1.HeartbeatRequest) (*pulsev1.HeartbeatResponse, error) {
					resp := fakegateway.HoldAll(req)
					for _, r := range resp.GetResults() {
						if r.GetJobId() == "doomed" {
							r.LeaseHeld, r.Canceled = false, c.canceled
						}
					}
					return resp, nil
				})
				require.ErrorIs(t, h.awaitCause(t), c.wantCause)
				res := gw.NextResult(t)
				require.Equal(t, "doomed", res.GetJobId())
				require.Equal(t, pulsev1.Outcome_OUTCOME_FAIL, res.GetOutcome())

				close(h.release)
				require.Equal(t, pulsev1.Outcome_OUTCOME_COMPLETE, gw.NextResult(t).GetOutcome())
			})
		}
	})

	t.Run("FailingHeartbeatsLoseTheLeaseAfterTheTTL", func(t *testing.T) {
		t.Parallel()
		welcome := fakegateway.FastWelcome()
		welcome.LeaseTtl = durationpb.New(100 * time.Millisecond)
		gw := fakegateway.New(t, "gw-1", welcome)
		gw.SetHeartbeatFn(func(*pulsev1.HeartbeatRequest) (*pulsev1.HeartbeatResponse, error) {
			return nil, status.Error(codes.Unavailable, "database down")
		})
		h := newBlockingHandler()
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": h.handle})
		gw.NextStream(t).Assign(fakegateway.Assignment("j1", "t"))
		h.awaitStart(t)

		require.ErrorIs(t, h.awaitCause(t), ErrLeaseLost)
	})

	t.Run("ReconnectsToTheNextGatewayAndStillReportsResults", func(t *testing.T) {
		t.Parallel()
		gwA := fakegateway.New(t, "gw-a", fakegateway.FastWelcome())
		gwB := fakegateway.New(t, "gw-b", fakegateway.FastWelcome())
		h := newBlockingHandler()
		startWorker(t, []string{gwA.Addr(), gwB.Addr()}, map[string]Handler{"t": h.handle})
		fsA := gwA.NextStream(t)
		fsA.Assign(fakegateway.Assignment("j1", "t"))
		h.awaitStart(t)

		fsA.Kill()
		fsB := gwB.NextStream(t)
		require.Equal(t, int32(1), fsB.Open.GetInFlight())

		close(h.release)
		res := gwB.NextResult(t)
		require.Equal(t, "j1", res.GetJobId())
		require.Equal(t, pulsev1.Outcome_OUTCOME_COMPLETE, res.GetOutcome())
		fsB.AwaitCredits(t, 1)

		fsB.Assign(fakegateway.Assignment("j2", "t"))
		require.Equal(t, "j2", h.awaitStart(t))
		require.Equal(t, "j2", gwB.NextResult(t).GetJobId())
	})

	t.Run("RetriesResultsWhileTheGatewayIsUnavailable", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		var failures atomic.Int32
		gw.SetReportFn(func(req *pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error) {
			if failures.Add(1) <= 3 {
				return nil, status.Error(codes.Unavailable, "restarting")
			}
			return &pulsev1.ReportResultResponse{}, nil
		})
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": noop})
		gw.NextStream(t).Assign(fakegateway.Assignment("j1", "t"))

		require.Equal(t, "j1", gw.NextResult(t).GetJobId())
		require.Equal(t, 4, gw.Reports())
	})

	t.Run("DoesNotRetryARejectedResult", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		gw.SetReportFn(func(req *pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error) {
			resp := &pulsev1.ReportResultResponse{}
			for _, r := range req.GetResults() {
				resp.Acks = append(resp.Acks, &pulsev1.ResultAck{
					JobId: r.GetJobId(), Attempt: r.GetAttempt(),
					Code: int32(codes.FailedPrecondition), Message: "stale attempt",
				})
			}
			return resp, nil
		})
		w := startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": noop})
		gw.NextStream(t).Assign(fakegateway.Assignment("j1", "t"))
		gw.NextResult(t)

		require.NoError(t, w.stop(t))
		require.Equal(t, 1, gw.Reports())
	})

	t.Run("ShutdownWaitsForRunningJobsAndFlushesTheirResults", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		h := newBlockingHandler()
		w := startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": h.handle})
		fs := gw.NextStream(t)
		fs.Assign(fakegateway.Assignment("j1", "t"))
		h.awaitStart(t)

		w.cancel()
		select {
		case <-fs.Gone():
		case <-time.After(liveness):
			t.Fatal("gateway did not see the worker leave")
		}
		select {
		case err := <-w.done:
			t.Fatalf("Run returned before the running job finished: %v", err)
		default:
		}
		close(h.release)
		require.NoError(t, w.stop(t))

		res := gw.NextResult(t)
		require.Equal(t, "j1", res.GetJobId())
		require.Equal(t, pulsev1.Outcome_OUTCOME_COMPLETE, res.GetOutcome())
	})

	t.Run("ShutdownTimeoutCancelsHandlersThatRunOn", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		h := newBlockingHandler()
		w := startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": h.handle}, WithShutdownTimeout(0))
		gw.NextStream(t).Assign(fakegateway.Assignment("j1", "t"))
		h.awaitStart(t)

		require.NoError(t, w.stop(t))
		require.ErrorIs(t, h.awaitCause(t), ErrWorkerShutdown)
		res := gw.NextResult(t)
		require.Equal(t, pulsev1.Outcome_OUTCOME_FAIL, res.GetOutcome())
	})
}

func TestWorkerMisuse(t *testing.T) {
	t.Parallel()

	t.Run("RunWithoutHandlersFails", func(t *testing.T) {
		t.Parallel()
		w, err := NewWorker([]string{"localhost:1"})
		require.NoError(t, err)
		require.ErrorIs(t, w.Run(t.Context()), ErrNoHandlers)
	})

	t.Run("RunTwiceFails", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		w := startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": noop})
		gw.NextStream(t)
		require.ErrorIs(t, w.Run(t.Context()), ErrWorkerStarted)
	})

	t.Run("BadRegistrationsPanic", func(t *testing.T) {
		t.Parallel()
		w, err := NewWorker([]string{"localhost:1"})
		require.NoError(t, err)
		require.Panics(t, func() { w.Register("", noop) })
		require.Panics(t, func() { w.Register("t", nil) })
		w.Register("t", noop)
		require.Panics(t, func() { w.Register("t", noop) })
	})

	t.Run("InvalidOptionsAreRejected", func(t *testing.T) {
		t.Parallel()
		_, err := NewWorker(nil)
		require.Error(t, err)
		_, err = NewWorker([]string{"localhost:1"}, WithConcurrency(0))
		require.ErrorContains(t, err, "concurrency")
		_, err = NewWorker([]string{"localhost:1"}, WithMaxReportBatch(-1))
		require.ErrorContains(t, err, "max report batch")
	})

	t.Run("DefaultWorkerIDIsUniquePerWorker", func(t *testing.T) {
		t.Parallel()
		a, err := NewWorker([]string{"localhost:1"})
		require.NoError(t, err)
		b, err := NewWorker([]string{"localhost:1"})
		require.NoError(t, err)
		require.NotEqual(t, a.ID(), b.ID())
	})
}

func TestPermanent(t *testing.T) {
	t.Parallel()

	base := errors.New("bad input")
	wrapped := Permanent(base)
	require.True(t, IsPermanent(wrapped))
	require.ErrorIs(t, wrapped, base)
	require.Equal(t, "bad input", wrapped.Error())
	require.True(t, IsPermanent(errors.Join(errors.New("x"), wrapped)))
	require.False(t, IsPermanent(base))
	require.NoError(t, Permanent(nil))
}
