package pulse_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// A logging middleware, applied here to a handler by hand; a worker
// applies it to every handler with Worker.Use.
func ExampleMiddleware() {
	logging := func(next pulse.Handler) pulse.Handler {
		return func(ctx context.Context, job *pulse.Job) error {
			fmt.Printf("start %s attempt %d\n", job.Topic, job.Attempt)
			err := next(ctx, job)
			fmt.Printf("end %s: %v\n", job.Topic, err)
			return err
		}
	}
	send := func(ctx context.Context, job *pulse.Job) error { return errors.New("smtp down") }

	_ = logging(send)(context.Background(), &pulse.Job{ID: "j1", Topic: "email.send", Attempt: 2})
	// Output:
	// start email.send attempt 2
	// end email.send: smtp down
}

// Use wraps every handler of a worker, the first middleware outermost; a
// topic can carry its own default timeout.
func ExampleWorker_Use() {
	w, err := pulse.NewWorker([]string{"localhost:50052"})
	if err != nil {
		panic(err)
	}
	recoverAsPermanent := func(next pulse.Handler) pulse.Handler {
		return func(ctx context.Context, job *pulse.Job) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = pulse.Permanent(fmt.Errorf("panic: %v", v)) // dead-letter, do not retry
				}
			}()
			return next(ctx, job)
		}
	}
	logAttempts := func(next pulse.Handler) pulse.Handler {
		return func(ctx context.Context, job *pulse.Job) error {
			start := time.Now()
			err := next(ctx, job)
			slog.InfoContext(ctx, "attempt", "job", job.ID, "attempt", job.Attempt, "took", time.Since(start), "err", err)
			return err
		}
	}
	w.Use(logAttempts, recoverAsPermanent)
	w.Register("report.render", func(ctx context.Context, job *pulse.Job) error {
		<-ctx.Done() // a render that overruns 2 minutes fails "timed out after 2m0s" and is retried
		return ctx.Err()
	}, pulse.WithTimeout(2*time.Minute))
	// w.Run(ctx) then runs every handler through logAttempts and recoverAsPermanent.
}

// An interceptor sees every job the client enqueues: here it stamps the
// tenant from the context onto the job's args and gives every job a
// default timeout (an option appended last wins over the caller's).
func ExampleWithEnqueueInterceptor() {
	type tenantKey struct{}
	perTenant := func(ctx context.Context, req *pulse.JobRequest, next pulse.EnqueueFunc) (pulse.Submitted, error) { //nolint:unparam // an interceptor has EnqueueFunc's signature
		tenant, ok := ctx.Value(tenantKey{}).(string)
		if !ok {
			return pulse.Submitted{}, errors.New("enqueue without a tenant")
		}
		req.Args = map[string]any{"tenant": tenant, "payload": req.Args}
		req.Options = append([]pulse.EnqueueOption{pulse.Timeout(time.Minute)}, req.Options...)
		return next(ctx, req)
	}

	// The chain as the client runs it, with a stand-in for the RPC.
	send := func(ctx context.Context, req *pulse.JobRequest) (pulse.Submitted, error) {
		spec, err := req.Spec()
		if err != nil {
			return pulse.Submitted{}, err
		}
		fmt.Printf("%s %s timeout=%s\n", spec.GetTopic(), spec.GetArgs(), spec.GetTimeout().AsDuration())
		return pulse.Submitted{ID: "job-1"}, nil
	}
	ctx := context.WithValue(context.Background(), tenantKey{}, "acme")
	_, _ = perTenant(ctx, &pulse.JobRequest{Topic: "email.send", Args: map[string]string{"to": "a@example.com"}}, send)
	_, err := perTenant(context.Background(), &pulse.JobRequest{Topic: "email.send"}, send)
	fmt.Println(err)
	// With a real control-api it is pulse.NewClient("localhost:50051",
	// pulse.WithEnqueueInterceptor(perTenant)).

	// Output:
	// email.send {"payload":{"to":"a@example.com"},"tenant":"acme"} timeout=1m0s
	// enqueue without a tenant
}

// A job that may run for at most 30 seconds per attempt, and that is
// enqueued at most once per hour for the same shop and day.
func ExampleUniqueFor() {
	req := pulse.JobRequest{
		Topic:   "report.build",
		Args:    map[string]any{"shop": 7, "day": "2026-11-23"},
		Options: []pulse.EnqueueOption{pulse.UniqueFor(time.Hour), pulse.Timeout(30 * time.Second)},
	}
	spec, err := req.Spec()
	if err != nil {
		panic(err)
	}
	// With a client, client.Enqueue(ctx, req.Topic, req.Args,
	// req.Options...) a second time within the hour returns the first job
	// with Submitted.Duplicate set, whatever its status.
	fmt.Println(spec.GetUniqueFor().AsDuration(), spec.GetTimeout().AsDuration())
	// Output: 1h0m0s 30s
}

// A job's own backoff: exponential from 2s (jittered, at most 10m) or a
// fixed wait; the request's spec shows what is sent.
func ExampleExponentialBackoff() {
	for _, opt := range []pulse.EnqueueOption{
		pulse.ExponentialBackoff(2*time.Second, 10*time.Minute),
		pulse.FixedBackoff(30 * time.Second),
	} {
		req := pulse.JobRequest{Topic: "webhook.deliver", Options: []pulse.EnqueueOption{opt}}
		spec, err := req.Spec()
		if err != nil {
			panic(err)
		}
		r := spec.GetRetry()
		fmt.Println(r.GetBase().AsDuration(), r.GetMax().AsDuration(), r.GetFixed().AsDuration())
	}
	// Output:
	// 2s 10m0s 0s
	// 0s 0s 30s
}

// A handler that knows when to come back says so: the attempt fails and
// the next one starts 30s later, whatever the job's backoff.
func ExampleRetryAfter() {
	deliver := func(ctx context.Context, job *pulse.Job) error { //nolint:unparam // a Handler's signature
		status, retryAfter := 429, 30*time.Second // a rate-limited HTTP call
		if status == 429 {
			return pulse.RetryAfter(retryAfter, fmt.Errorf("webhook: HTTP %d", status))
		}
		return nil
	}
	err := deliver(context.Background(), &pulse.Job{ID: "j1", Topic: "webhook.deliver", Attempt: 1})
	d, ok := pulse.RetryAfterOf(err)
	fmt.Println(err, d, ok)
	// Output:
	// webhook: HTTP 429 30s true
}
