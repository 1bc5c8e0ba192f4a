package pulsetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetest"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// startWorker runs w until the test ends; it is registered after the
// gateway, so it stops first.
func startWorker(t *testing.T, w *pulse.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func TestGatewayRunsTheApplicationsWorker(t *testing.T) {
	t.Parallel()
	gw := pulsetest.NewGateway(t)
	w, err := pulse.NewWorker([]string{gw.Addr()}, pulse.WithLogger(slog.New(slog.DiscardHandler)), pulse.WithConcurrency(4))
	require.NoError(t, err)
	sendEmail := pulse.NewTopic[signupArgs]("email.send")
	sendEmail.Register(w, func(_ context.Context, _ *pulse.Job, args signupArgs) error {
		if args.Email == "" {
			return pulse.Permanent(errors.New("no address"))
		}
		return nil
	})
	startWorker(t, w)

	ctx := t.Context()
	gw.Dispatch(ctx, t, "email.send", signupArgs{Email: "a@example.com"}).RequireCompleted(t)
	require.Equal(t, "no address", gw.Dispatch(ctx, t, "email.send", signupArgs{}).RequirePermanent(t))
	require.Contains(t, gw.Dispatch(ctx, t, "not.registered", nil).RequireFailed(t), `no handler registered for topic "not.registered"`)

	// Concurrent dispatches each get their own job's result.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			res := gw.Dispatch(ctx, t, "email.send", signupArgs{Email: fmt.Sprintf("%d@example.com", i)})
			res.RequireCompleted(t)
		})
	}
	wg.Wait()
}

func TestControlRecordsWhatTheClientEnqueued(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ctl := pulsetest.NewControl(t)
	client := ctl.Client(t)

	sub, err := client.Enqueue(ctx, "signup.welcome", signupArgs{Email: "a@example.com"},
		pulse.Priority(8), pulse.IdempotencyKey("signup-1"), pulse.Timeout(time.Minute))
	require.NoError(t, err)
	require.False(t, sub.Duplicate)

	job := ctl.RequireEnqueued(t, "signup.welcome", signupArgs{Email: "a@example.com"})
	require.Equal(t, sub.ID, job.ID)
	require.Equal(t, 8, job.Priority)
	require.Equal(t, 25, job.MaxAttempts)
	require.Equal(t, time.Minute, job.Timeout)
	ctl.RequireEnqueued(t, "signup.welcome", json.RawMessage(`{ "email" : "a@example.com" }`))
	ctl.RequireEnqueued(t, "signup.welcome", map[string]any{"email": "a@example.com"})
	ctl.RequireEnqueued(t, "signup.welcome", nil)
	ctl.RequireEnqueued(t, "signup.welcome", func(args json.RawMessage) bool { return len(args) > 2 })
	ctl.RequireNotEnqueued(t, "signup.reminder")

	// The key makes a retried enqueue a duplicate of the first job.
	again, err := client.Enqueue(ctx, "signup.welcome", signupArgs{Email: "other@example.com"}, pulse.IdempotencyKey("signup-1"))
	require.NoError(t, err)
	require.Equal(t, pulse.Submitted{ID: sub.ID, Duplicate: true}, again)
	require.Len(t, ctl.Enqueued(), 1)

	// So does a unique period, by topic and args as JSON values.
	u1, err := client.Enqueue(ctx, "report.daily", json.RawMessage(`{"day":"2026-11-26","n":1}`), pulse.UniqueFor(time.Hour))
	require.NoError(t, err)
	u2, err := client.Enqueue(ctx, "report.daily", json.RawMessage(`{"n":1, "day":"2026-11-26"}`), pulse.UniqueFor(time.Hour))
	require.NoError(t, err)
	require.Equal(t, pulse.Submitted{ID: u1.ID, Duplicate: true}, u2)

	// A replace key replaces the recorded job's args (and run time); with
	// KeepFirst it is kept.
	r1, err := client.Enqueue(ctx, "search.reindex", json.RawMessage(`{"rev":1}`), pulse.ReplacePending("doc-7", pulse.Replace))
	require.NoError(t, err)
	r2, err := client.Enqueue(ctx, "search.reindex", json.RawMessage(`{"rev":2}`), pulse.ReplacePending("doc-7", pulse.Replace))
	require.NoError(t, err)
	require.Equal(t, pulse.Submitted{ID: r1.ID, Duplicate: true, Replaced: true}, r2)
	r3, err := client.Enqueue(ctx, "search.reindex", json.RawMessage(`{"rev":3}`), pulse.ReplacePending("doc-7", pulse.KeepFirst))
	require.NoError(t, err)
	require.Equal(t, pulse.Submitted{ID: r1.ID, Duplicate: true}, r3)
	ctl.RequireEnqueued(t, "search.reindex", json.RawMessage(`{"rev":2}`))

	// A batch goes in whole; GetJob answers an enqueued job.
	subs, err := client.EnqueueMany(ctx, []pulse.JobRequest{{Topic: "a", Args: nil}, {Topic: "b", Args: []byte(`{"x":1}`)}})
	require.NoError(t, err)
	require.Len(t, subs, 2)
	ctl.RequireEnqueued(t, "b", []byte(`{"x":1}`))
	info, err := client.Get(ctx, subs[1].ID)
	require.NoError(t, err)
	require.Equal(t, pulsetype.StatusPending, info.Status)
	_, err = client.Get(ctx, "nope")
	require.Equal(t, codes.NotFound, status.Code(err))

	ctl.Reset()
	require.Empty(t, ctl.Enqueued())
}

func TestControlRefusesWhatTheServerRefuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ctl := pulsetest.NewControl(t)
	client := ctl.Client(t)
	for args, want := range map[string]string{
		`[1]`:    "args: must be a JSON object",
		`"text"`: "args: must be a JSON object",
		`{"a":`:  "args: must be a JSON object",
	} {
		_, err := client.Enqueue(ctx, "t", json.RawMessage(args))
		require.Equal(t, codes.InvalidArgument, status.Code(err), args)
		require.ErrorContains(t, err, want, args)
	}
	_, err := client.EnqueueMany(ctx, []pulse.JobRequest{{Topic: "t"}, {Topic: "t", Args: json.RawMessage(`[2]`)}})
	require.ErrorContains(t, err, "jobs[1].args")
	require.Empty(t, ctl.Enqueued(), "a refused batch leaves nothing")
}

func TestRequireEnqueuedFailsNamingWhatWasEnqueued(t *testing.T) {
	t.Parallel()
	ctl := pulsetest.NewControl(t)
	_, err := ctl.Client(t).Enqueue(t.Context(), "signup.welcome", signupArgs{Email: "a@example.com"})
	require.NoError(t, err)

	msg := failure(func(ft testing.TB) { ctl.RequireEnqueued(ft, "signup.welcome", signupArgs{Email: "b@example.com"}) })
	require.Contains(t, msg, `no job of topic "signup.welcome" with matching args was enqueued`)
	require.Contains(t, msg, `signup.welcome {"email":"a@example.com"}`)
	require.Contains(t, failure(func(ft testing.TB) { ctl.RequireEnqueued(ft, "other", nil) }), "no job of topic")
	require.Contains(t, failure(func(ft testing.TB) { ctl.RequireNotEnqueued(ft, "signup.welcome") }), `want no job of topic "signup.welcome"`)
	require.Empty(t, failure(func(ft testing.TB) { ctl.RequireEnqueued(ft, "signup.welcome", nil) }))
}
