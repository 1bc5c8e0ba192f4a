package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/pulsequeue/pulse/examples/middleware"
	"github.com/pulsequeue/pulse/pkg/pulse"
)

// chain applies middleware as Worker.Use does, the first outermost, so the
// examples can run a handler without a gateway.
func chain(h pulse.Handler, mw ...pulse.Middleware) pulse.Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// Logging, here to stdout without times so the output is stable.
func ExampleLogging() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "took" {
				return slog.Attr{}
			}
			return a
		},
	}))
	h := chain(func(context.Context, *pulse.Job) error { return errors.New("smtp down") }, middleware.Logging(logger))
	_ = h(context.Background(), &pulse.Job{ID: "j1", Topic: "email.send", Attempt: 2})
	// Output:
	// level=WARN msg="job attempt failed" topic=email.send job=j1 attempt=2 err="smtp down" timed_out=false
}

// Metrics counts outcomes per topic, a timeout apart from other failures.
func ExampleMetrics() {
	var m middleware.Metrics
	outcomes := []error{nil, nil, errors.New("boom"), pulse.Permanent(errors.New("bad args"))}
	for i, want := range outcomes {
		h := chain(func(context.Context, *pulse.Job) error { return want }, m.Middleware())
		_ = h(context.Background(), &pulse.Job{ID: strconv.Itoa(i), Topic: "report.render", Attempt: 1})
	}
	// A handler that runs out of its timeout returns ctx.Err(); the
	// context says why it ended (the worker's SDK sets this cause).
	ctx, cancel := context.WithTimeoutCause(context.Background(), time.Millisecond, &pulse.TimeoutError{Timeout: time.Millisecond})
	defer cancel()
	slow := chain(func(ctx context.Context, _ *pulse.Job) error { <-ctx.Done(); return ctx.Err() }, m.Middleware())
	_ = slow(ctx, &pulse.Job{ID: "slow", Topic: "report.render", Attempt: 1})
	fmt.Println(m.String())
	// Output: report.render: done=2 failed=1 permanent=1 timed_out=1;
}

// DeadLetterPanics turns a handler's panic into a permanent failure.
func ExampleDeadLetterPanics() {
	h := chain(func(context.Context, *pulse.Job) error { panic("nil map") }, middleware.DeadLetterPanics)
	err := h(context.Background(), &pulse.Job{ID: "j1", Topic: "image.resize", Attempt: 1})
	fmt.Println(err, pulse.IsPermanent(err))
	// Output: panic: nil map true
}

// The tenant travels from the producer's context, through the job's args,
// into the handler's context.
func ExampleTenantInterceptor() {
	handler := chain(func(ctx context.Context, job *pulse.Job) error {
		tenant, _ := middleware.TenantFrom(ctx)
		fmt.Printf("handler: tenant=%s args=%s\n", tenant, job.Args)
		return nil
	}, middleware.Tenant)

	// The client's RPC, stood in for by a function that hands the job to
	// the handler as a worker would receive it.
	deliver := func(ctx context.Context, req *pulse.JobRequest) (pulse.Submitted, error) {
		spec, err := req.Spec()
		if err != nil {
			return pulse.Submitted{}, err
		}
		fmt.Printf("sent: %s\n", spec.GetArgs())
		err = handler(context.Background(), &pulse.Job{ID: "j1", Topic: spec.GetTopic(), Attempt: 1, Args: spec.GetArgs()})
		return pulse.Submitted{ID: "j1"}, err
	}
	ctx := middleware.WithTenant(context.Background(), "acme")
	_, _ = middleware.TenantInterceptor(ctx, &pulse.JobRequest{Topic: "invoice.send", Args: map[string]int{"invoice": 42}}, deliver)
	_, err := middleware.TenantInterceptor(context.Background(), &pulse.JobRequest{Topic: "invoice.send"}, deliver)
	fmt.Println(err)
	// Output:
	// sent: {"tenant":"acme","payload":{"invoice":42}}
	// handler: tenant=acme args={"invoice":42}
	// enqueue without a tenant in the context
}
