package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/pulsequeue/pulse/examples/middleware"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetest"
)

type order struct {
	ID int `json:"id"`
}

// The tenant travels from the producer's context, through the job's args,
// into the handler's context: the real client and its interceptor on one
// side, a real worker and its middleware on the other.
func TestTenantTravelsFromProducerToHandler(t *testing.T) {
	t.Parallel()
	ctl := pulsetest.NewControl(t)
	client := ctl.Client(t, pulse.WithEnqueueInterceptor(middleware.TenantInterceptor))

	ctx := middleware.WithTenant(t.Context(), "acme")
	if _, err := client.Enqueue(ctx, "order.confirm", order{ID: 42}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(t.Context(), "order.confirm", order{ID: 43}); !errors.Is(err, middleware.ErrNoTenant) {
		t.Fatalf("an enqueue without a tenant: got %v, want ErrNoTenant", err)
	}
	job := ctl.RequireEnqueued(t, "order.confirm", map[string]any{"tenant": "acme", "payload": map[string]any{"id": 42}})
	if n := len(ctl.Enqueued()); n != 1 {
		t.Fatalf("%d jobs enqueued, want 1", n)
	}

	var gotTenant string
	var gotOrder order
	res := pulsetest.Work(t.Context(), t, func(ctx context.Context, job *pulse.Job) error {
		gotTenant, _ = middleware.TenantFrom(ctx)
		return job.UnmarshalArgs(&gotOrder)
	}, job.Args, pulsetest.WithTopic(job.Topic), pulsetest.WithMiddleware(middleware.Tenant))
	res.RequireCompleted(t)
	if gotTenant != "acme" || gotOrder.ID != 42 {
		t.Fatalf("the handler saw tenant %q and order %+v, want acme and 42", gotTenant, gotOrder)
	}

	// A job that skipped the interceptor is dead-lettered, not retried.
	res = pulsetest.Work(t.Context(), t, func(context.Context, *pulse.Job) error { return nil },
		json.RawMessage(`{"id":42}`), pulsetest.WithJobID("bare"), pulsetest.WithMiddleware(middleware.Tenant))
	if msg := res.RequirePermanent(t); msg != "job bare has no tenant envelope" {
		t.Fatalf("got %q", msg)
	}
}

// Without DeadLetterPanics the worker retries a panicking job; with it the
// job is dead-lettered at once, and middleware outside it sees the error.
func TestDeadLetterPanicsInARealWorker(t *testing.T) {
	t.Parallel()
	panics := func(context.Context, *pulse.Job) error { panic("nil map") }

	res := pulsetest.Work(t.Context(), t, panics, nil)
	if msg := res.RequireFailed(t); msg != "panic: nil map" || !res.Panicked {
		t.Fatalf("without the policy: %q (panicked %v)", msg, res.Panicked)
	}

	var m middleware.Metrics
	res = pulsetest.Work(t.Context(), t, panics, nil,
		pulsetest.WithTopic("report.render"), pulsetest.WithMiddleware(m.Middleware(), middleware.DeadLetterPanics))
	if msg := res.RequirePermanent(t); msg != "panic: nil map" {
		t.Fatalf("with the policy: %q", msg)
	}
	if got := m.String(); !strings.Contains(got, "report.render: done=0 failed=0 permanent=1") {
		t.Fatalf("metrics: %s", got)
	}
}

// Metrics tells a timeout from other failures when the worker's own
// timeout ends the attempt.
func TestMetricsCountsARealTimeout(t *testing.T) {
	t.Parallel()
	var m middleware.Metrics
	res := pulsetest.Work(t.Context(), t, func(ctx context.Context, _ *pulse.Job) error {
		<-ctx.Done()
		return ctx.Err()
	}, nil, pulsetest.WithTopic("report.render"), pulsetest.WithMiddleware(m.Middleware()),
		pulsetest.WithEnqueueOptions(pulse.Timeout(pulse.MinTimeout)))
	if msg := res.RequireFailed(t); msg != "timed out after 1s" {
		t.Fatalf("got %q", msg)
	}
	if got := m.String(); !strings.Contains(got, "timed_out=1") {
		t.Fatalf("metrics: %s", got)
	}
}
