// Command demo-middleware runs the example middleware of package
// ../middleware against a running fleet: a producer whose client stamps
// each job with its tenant (an enqueue interceptor), and a worker whose
// handler runs inside logging, metrics, the tenant's context and a panic
// policy (Worker.Use), with a per-topic timeout. It enqueues PULSE_DEMO_JOBS
// jobs, waits until the worker has settled each, prints the metrics and
// exits 0 (1 if they do not settle within a minute).
//
// Environment:
//
//	PULSE_CONTROL_API_ADDR  control-api gRPC address (default localhost:50051)
//	PULSE_GATEWAY_ADDRS     comma-separated dispatch-gateway addresses (default localhost:50052)
//	PULSE_DEMO_JOBS         how many jobs to enqueue (default 20)
//
// -h prints this environment list.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pulsequeue/pulse/examples/middleware"
	"github.com/pulsequeue/pulse/pkg/pulse"
)

const (
	topic   = "demo.mw.invoice"
	settle  = time.Minute
	timeout = time.Second

	usage = `usage: demo-middleware

Enqueues jobs for two tenants through an interceptor and runs them in a
worker wrapped in logging, metrics, tenant and panic-policy middleware.

Environment:
  PULSE_CONTROL_API_ADDR  control-api gRPC address (default localhost:50051)
  PULSE_GATEWAY_ADDRS     comma-separated dispatch-gateway addresses (default localhost:50052)
  PULSE_DEMO_JOBS         how many jobs to enqueue (default 20)
`
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	if len(os.Args) > 1 {
		fmt.Fprint(os.Stderr, usage)
		if os.Args[1] == "-h" || os.Args[1] == "--help" {
			os.Exit(0)
		}
		os.Exit(2)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, logger)
	stop()
	if err != nil {
		logger.Error("demo-middleware", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger) error {
	n, err := strconv.Atoi(env("PULSE_DEMO_JOBS", "20"))
	if err != nil || n < 1 {
		return fmt.Errorf("PULSE_DEMO_JOBS must be a positive number, got %q", os.Getenv("PULSE_DEMO_JOBS"))
	}

	var metrics middleware.Metrics
	w, err := pulse.NewWorker(strings.Split(env("PULSE_GATEWAY_ADDRS", "localhost:50052"), ","), pulse.WithLogger(logger))
	if err != nil {
		return err
	}
	// Outermost first: the tenant goes into the context, then every
	// attempt is logged (with its tenant) and counted, and a panic
	// dead-letters its job.
	w.Use(middleware.Tenant, middleware.Logging(logger), metrics.Middleware(), middleware.DeadLetterPanics)
	w.Register(topic, func(ctx context.Context, job *pulse.Job) error {
		tenant, _ := middleware.TenantFrom(ctx)
		var inv struct {
			N int `json:"n"`
		}
		if err := job.UnmarshalArgs(&inv); err != nil {
			return pulse.Permanent(err)
		}
		switch {
		case inv.N%7 == 3:
			panic(fmt.Sprintf("invoice %d of %s: a bug", inv.N, tenant))
		case inv.N%5 == 4:
			<-ctx.Done() // overruns the topic's timeout
			return ctx.Err()
		case inv.N%4 == 2:
			return errors.New("payment provider unavailable")
		}
		return nil
	}, pulse.WithTimeout(timeout))

	workCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	done := make(chan error, 1)
	go func() { done <- w.Run(workCtx) }()

	client, err := pulse.NewClient(env("PULSE_CONTROL_API_ADDR", "localhost:50051"),
		pulse.WithEnqueueInterceptor(middleware.TenantInterceptor))
	if err != nil {
		return err
	}
	defer client.Close()
	for i := range n {
		tenant := []string{"acme", "globex"}[i%2]
		// One attempt each, so every job settles at once: done, failed
		// (timed out, panicked, or an error) and dead-lettered.
		if _, err := client.Enqueue(middleware.WithTenant(ctx, tenant), topic, map[string]int{"n": i}, pulse.MaxAttempts(1)); err != nil {
			return fmt.Errorf("enqueue %d: %w", i, err)
		}
	}
	if _, err := client.Enqueue(ctx, topic, nil); !errors.Is(err, middleware.ErrNoTenant) {
		return fmt.Errorf("an enqueue without a tenant was not refused: %w", err)
	}

	deadline := time.After(settle)
	for {
		c := metrics.Snapshot()[topic]
		if c.Done+c.Failed+c.Permanent+c.TimedOut >= n {
			break
		}
		select {
		case <-deadline:
			return fmt.Errorf("only %d of %d jobs settled within %s: %s", c.Done+c.Failed+c.Permanent+c.TimedOut, n, settle, metrics.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopWorker()
	if err := <-done; err != nil {
		return err
	}
	fmt.Println("metrics:", metrics.String())
	return nil
}
