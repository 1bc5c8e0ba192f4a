// Command compose-worker is the worker the compose test (make compose-test)
// runs inside the compose network, next to the demo worker: it runs the
// test's topics and completes every job it is given, so the test can
// require that every job it submitted ends COMPLETED.
//
// Environment:
//
//	PULSE_GATEWAY_ADDRS     comma-separated dispatch-gateway targets (dns:///name:port balances over every replica)
//	PULSE_TEST_TOPICS       comma-separated topics to run
//	PULSE_TEST_STREAMS      independent workers (one StreamJobs stream each) in this process (default 1)
//	PULSE_TEST_CONCURRENCY  handlers per worker (default 8)
//	PULSE_USER              user to authenticate as, with PULSE_PASSWORD (none when unset)
//	PULSE_PASSWORD          that user's password
//
// A handler takes 10-60 ms, so a gateway stopped under load has jobs in
// flight. Each worker dials on its own, so with a dns:/// target its
// stream lands on a replica of gRPC's round-robin choosing and its
// heartbeats and reports go round-robin over every replica.
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

const roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("service", "compose-worker")
	if err := run(logger); err != nil {
		logger.Error("compose-worker failed", "error", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger) error {
	addrs := split(os.Getenv("PULSE_GATEWAY_ADDRS"))
	topics := split(os.Getenv("PULSE_TEST_TOPICS"))
	if len(addrs) == 0 || len(topics) == 0 {
		return errors.New("PULSE_GATEWAY_ADDRS and PULSE_TEST_TOPICS are required")
	}
	streams, err := positive("PULSE_TEST_STREAMS", 1)
	if err != nil {
		return err
	}
	concurrency, err := positive("PULSE_TEST_CONCURRENCY", 8)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	host, _ := os.Hostname()
	var done atomic.Int64
	handler := func(ctx context.Context, job *pulse.Job) error {
		t := time.NewTimer(time.Duration(10+rand.IntN(51)) * time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
		done.Add(1)
		return nil
	}
	var (
		wg   sync.WaitGroup
		errs = make(chan error, streams)
	)
	for i := range streams {
		w, err := pulse.NewWorker(addrs, append([]pulse.WorkerOption{
			pulse.WithConcurrency(concurrency),
			pulse.WithWorkerID(fmt.Sprintf("%s-%d", host, i)),
			pulse.WithLogger(logger.With("worker", i)),
			pulse.WithDialOptions(grpc.WithDefaultServiceConfig(roundRobin)),
		}, credentials()...)...)
		if err != nil {
			return err
		}
		for _, topic := range topics {
			w.Register(topic, handler)
		}
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				errs <- fmt.Errorf("worker %d: %w", i, err)
				stop()
			}
		})
	}
	logger.Info("working", "gateways", addrs, "topics", topics, "streams", streams, "concurrency", concurrency)
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				logger.Info("progress", "done", done.Load())
			}
		}
	}()
	wg.Wait()
	close(errs)
	logger.Info("stopped", "done", done.Load())
	return errors.Join(func() (out []error) {
		for err := range errs {
			out = append(out, err)
		}
		return out
	}()...)
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func positive(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s: want a positive integer, got %q", name, v)
	}
	return n, nil
}

// credentials authenticate as PULSE_USER with PULSE_PASSWORD over the
// compose network, which is private, so plaintext is allowed; with no user
// they are nothing.
func credentials() []pulse.WorkerOption {
	user := os.Getenv("PULSE_USER")
	if user == "" {
		return nil
	}
	return []pulse.WorkerOption{pulse.WithUserPass(user, os.Getenv("PULSE_PASSWORD")), pulse.AllowPlaintextCredentials()}
}
