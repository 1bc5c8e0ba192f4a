// Command demo-worker runs the demo topics with handlers that take a little
// time and sometimes fail, so retries and dead letters show on dashboards.
//
// Environment:
//
//	PULSE_GATEWAY_ADDRS     comma-separated dispatch-gateway addresses (default localhost:50052)
//	PULSE_DEMO_CONCURRENCY  handlers run at once (default 8)
//	PULSE_DEMO_TOPICS       comma-separated topics (default email.send,report.render,image.resize)
//	PULSE_USER              user to authenticate as, with PULSE_PASSWORD (make dev and docker compose set the development worker)
//	PULSE_PASSWORD          that user's password
//	PULSE_ALLOW_PLAINTEXT_CREDENTIALS  true sends them over plaintext to an address that is not loopback (a trusted network only)
//	OTEL_EXPORTER_OTLP_ENDPOINT  an OTLP collector (e.g. http://jaeger:4317) to send each job's process and settle spans to
//
// A job whose args hold "fail_attempts": n fails its first n attempts and
// then completes, whatever the dice say: a retry on demand. Every line
// logged about a job carries its trace_id.
//
// An address may be a DNS name holding every gateway replica, as in
// docker-compose.yml's dns:///dispatch-gateway:50052: the worker balances
// its calls round-robin over the addresses the name resolves to.
//
// -h prints this environment list.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/pulsequeue/pulse/examples/internal/demotrace"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/tracelog"
)

const (
	addrsDefault       = "localhost:50052"
	concurrencyDefault = 8
	topicsDefault      = "email.send,report.render,image.resize"

	reportEvery   = 5 * time.Second
	transientRate = 0.10
	permanentRate = 0.01

	// roundRobin spreads a dns:/// target's calls over every address the
	// name resolves to (gRPC's default is the first address only).
	roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

	usage = `usage: demo-worker

Runs the demo topics with the Go SDK; handlers take 5-200 ms and sometimes fail.

Environment:
  PULSE_GATEWAY_ADDRS     comma-separated dispatch-gateway addresses (default localhost:50052; dns:///name:port balances over every replica)
  PULSE_DEMO_CONCURRENCY  handlers run at once (default 8)
  PULSE_DEMO_TOPICS       comma-separated topics (default email.send,report.render,image.resize)
  PULSE_USER              user to authenticate as, with PULSE_PASSWORD (make dev and docker compose set the development worker)
  PULSE_PASSWORD          that user's password
  PULSE_ALLOW_PLAINTEXT_CREDENTIALS  true sends them over plaintext to an address that is not loopback (a trusted network only)
  OTEL_EXPORTER_OTLP_ENDPOINT  an OTLP collector (e.g. http://jaeger:4317) to send each job's process and settle spans to

A job whose args hold "fail_attempts": n fails its first n attempts, then completes.
`
)

// counts are read by the progress logger while handlers update them.
type counts struct{ done, failed, permanent atomic.Int64 }

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help") {
		fmt.Print(usage)
		return
	}
	// Lines logged with a job's ctx carry its trace_id and span_id.
	logger := slog.New(tracelog.NewHandler(slog.NewJSONHandler(os.Stdout, nil))).With("service", "demo-worker")
	if err := run(logger); err != nil {
		logger.Error("demo-worker failed", "error", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger) error {
	addrs := strings.Split(envOr("PULSE_GATEWAY_ADDRS", addrsDefault), ",")
	topics := strings.Split(envOr("PULSE_DEMO_TOPICS", topicsDefault), ",")
	concurrency, err := strconv.Atoi(envOr("PULSE_DEMO_CONCURRENCY", strconv.Itoa(concurrencyDefault)))
	if err != nil || concurrency < 1 {
		return fmt.Errorf("PULSE_DEMO_CONCURRENCY: want a positive integer, got %q", os.Getenv("PULSE_DEMO_CONCURRENCY"))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdownTracing, err := demotrace.Setup(ctx, "demo-worker")
	if err != nil {
		return err
	}
	defer func() {
		if err := shutdownTracing(context.Background()); err != nil {
			logger.Warn("flush traces", "error", err)
		}
	}()

	opts := append([]pulse.WorkerOption{pulse.WithConcurrency(concurrency), pulse.WithLogger(logger),
		pulse.WithDialOptions(grpc.WithDefaultServiceConfig(roundRobin))}, credentials()...)
	w, err := pulse.NewWorker(addrs, opts...)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	var c counts
	for _, topic := range topics {
		w.Register(strings.TrimSpace(topic), handler(&c, logger))
	}
	go progress(ctx, logger, &c)
	logger.Info("working", "gateways", addrs, "concurrency", concurrency, "topics", topics)
	if err := w.Run(ctx); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	logger.Info("stopped", "done", c.done.Load(), "failed", c.failed.Load(), "permanent", c.permanent.Load())
	return nil
}

// demoArgs are the args the handler reads; any others are ignored.
type demoArgs struct {
	// FailAttempts fails the job's first FailAttempts attempts, then
	// completes it.
	FailAttempts int `json:"fail_attempts"`
}

// handler pretends to work for 5–200 ms, then fails about 10% of attempts
// (retried) and 1% permanently (dead-lettered); a job asking for
// fail_attempts fails exactly those and then completes.
func handler(c *counts, logger *slog.Logger) pulse.Handler {
	return func(ctx context.Context, job *pulse.Job) error {
		var args demoArgs
		_ = job.UnmarshalArgs(&args) // args of another shape ask for nothing
		if args.FailAttempts > 0 && job.Attempt <= args.FailAttempts {
			c.failed.Add(1)
			logger.WarnContext(ctx, "failing this attempt on purpose", "job_id", job.ID, "attempt", job.Attempt,
				"topic", job.Topic, "fail_attempts", args.FailAttempts)
			return fmt.Errorf("demo: asked to fail attempt %d of %d", job.Attempt, args.FailAttempts)
		}
		t := time.NewTimer(time.Duration(5+rand.IntN(196)) * time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
		if args.FailAttempts > 0 {
			c.done.Add(1)
			logger.InfoContext(ctx, "completed after failing on purpose", "job_id", job.ID, "attempt", job.Attempt, "topic", job.Topic)
			return nil
		}
		switch r := rand.Float64(); {
		case r < permanentRate:
			c.permanent.Add(1)
			return pulse.Permanent(errors.New("demo: input rejected"))
		case r < permanentRate+transientRate:
			c.failed.Add(1)
			return errors.New("demo: downstream timed out")
		}
		c.done.Add(1)
		return nil
	}
}

func progress(ctx context.Context, logger *slog.Logger, c *counts) {
	t := time.NewTicker(reportEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			logger.Info("progress", "done", c.done.Load(), "failed", c.failed.Load(), "permanent", c.permanent.Load())
		}
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// credentials are PULSE_USER and PULSE_PASSWORD as a connection option, or
// none when PULSE_USER is unset (a fleet running with PULSE_AUTH=none).
func credentials() []pulse.WorkerOption {
	user := os.Getenv("PULSE_USER")
	if user == "" {
		return nil
	}
	opts := []pulse.WorkerOption{pulse.WithUserPass(user, os.Getenv("PULSE_PASSWORD"))}
	// Beyond loopback the SDK sends credentials over plaintext only when
	// told to (docker-compose.yml's private network does).
	if os.Getenv("PULSE_ALLOW_PLAINTEXT_CREDENTIALS") == "true" {
		opts = append(opts, pulse.AllowPlaintextCredentials())
	}
	return opts
}
