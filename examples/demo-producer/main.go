// Command demo-producer enqueues a steady stream of small jobs through
// control-api so a local fleet's dashboards have something to show.
//
// Environment:
//
//	PULSE_CONTROL_API_ADDR  control-api gRPC address (default localhost:50051)
//	PULSE_DEMO_RATE         jobs per second (default 20)
//	PULSE_DEMO_TOPICS       comma-separated topics (default email.send,report.render,image.resize)
//	PULSE_USER              user to authenticate as, with PULSE_PASSWORD (make dev and docker compose set the development producer)
//	PULSE_PASSWORD          that user's password
//	PULSE_ALLOW_PLAINTEXT_CREDENTIALS  true sends them over plaintext to an address that is not loopback (a trusted network only)
//	OTEL_EXPORTER_OTLP_ENDPOINT  an OTLP collector (e.g. http://jaeger:4317) to send each submit's publish span to
//
// -h prints this environment list.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pulsequeue/pulse/examples/internal/demotrace"
	"github.com/pulsequeue/pulse/pkg/pulse"
)

const (
	addrDefault   = "localhost:50051"
	rateDefault   = 20.0
	topicsDefault = "email.send,report.render,image.resize"

	tick        = 100 * time.Millisecond
	reportEvery = 5 * time.Second
	backoffMin  = 200 * time.Millisecond
	backoffMax  = 5 * time.Second
	callTimeout = 5 * time.Second

	usage = `usage: demo-producer

Enqueues a steady stream of demo jobs through control-api.

Environment:
  PULSE_CONTROL_API_ADDR  control-api gRPC address (default localhost:50051)
  PULSE_DEMO_RATE         jobs per second (default 20)
  PULSE_DEMO_TOPICS       comma-separated topics (default email.send,report.render,image.resize)
  PULSE_USER              user to authenticate as, with PULSE_PASSWORD (make dev and docker compose set the development producer)
  PULSE_PASSWORD          that user's password
  PULSE_ALLOW_PLAINTEXT_CREDENTIALS  true sends them over plaintext to an address that is not loopback (a trusted network only)
  OTEL_EXPORTER_OTLP_ENDPOINT  an OTLP collector (e.g. http://jaeger:4317) to send each submit's publish span to
`
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help") {
		fmt.Print(usage)
		return
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("service", "demo-producer")
	if err := run(logger); err != nil {
		logger.Error("demo-producer failed", "error", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger) error {
	addr := envOr("PULSE_CONTROL_API_ADDR", addrDefault)
	topics := strings.Split(envOr("PULSE_DEMO_TOPICS", topicsDefault), ",")
	rate, err := strconv.ParseFloat(envOr("PULSE_DEMO_RATE", strconv.FormatFloat(rateDefault, 'f', -1, 64)), 64)
	if err != nil || rate <= 0 {
		return fmt.Errorf("PULSE_DEMO_RATE: want a positive number of jobs per second, got %q", os.Getenv("PULSE_DEMO_RATE"))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdownTracing, err := demotrace.Setup(ctx, "demo-producer")
	if err != nil {
		return err
	}
	defer func() {
		if err := shutdownTracing(context.Background()); err != nil {
			logger.Warn("flush traces", "error", err)
		}
	}()

	client, err := pulse.NewClient(addr, credentials()...)
	if err != nil {
		return fmt.Errorf("control-api client: %w", err)
	}
	defer client.Close()
	logger.Info("producing", "control_api", addr, "rate", rate, "topics", topics)

	var (
		owed                 float64 // jobs due but not yet sent; carries fractions between ticks
		sent, failed, window int
		backoff              = backoffMin
		ticker               = time.NewTicker(tick)
		report               = time.NewTicker(reportEvery)
	)
	defer ticker.Stop()
	defer report.Stop()
	for {
		select {
		case <-ctx.Done():
			logger.Info("stopped", "sent", sent, "failed", failed)
			return nil
		case <-report.C:
			logger.Info("progress", "sent", sent, "sent_last_5s", window, "failed", failed)
			window = 0
		case <-ticker.C:
			owed += rate * tick.Seconds()
			n := int(owed)
			if n == 0 {
				continue
			}
			owed -= float64(n)
			if err := enqueue(ctx, client, batch(n, topics)); err != nil {
				if ctx.Err() != nil {
					continue
				}
				failed += n
				logger.Warn("enqueue failed; backing off", "error", err, "backoff", backoff)
				sleep(ctx, backoff)
				backoff = min(backoff*2, backoffMax)
				owed = 0 // do not burst to catch up after an outage
				continue
			}
			backoff = backoffMin
			sent += n
			window += n
		}
	}
}

// enqueue bounds one EnqueueMany so a hung control-api looks like a failure
// and gets the backoff, instead of stalling the loop.
func enqueue(ctx context.Context, client *pulse.Client, jobs []pulse.JobRequest) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := client.EnqueueMany(ctx, jobs)
	return err
}

// batch builds n jobs spread over topics with random priorities; a few are
// delayed so scheduled work shows too.
func batch(n int, topics []string) []pulse.JobRequest {
	jobs := make([]pulse.JobRequest, n)
	for i := range jobs {
		topic := strings.TrimSpace(topics[rand.IntN(len(topics))])
		opts := []pulse.EnqueueOption{pulse.Priority(rand.IntN(pulse.MaxPriority + 1))}
		if rand.IntN(20) == 0 {
			opts = append(opts, pulse.Delay(time.Duration(1+rand.IntN(10))*time.Second))
		}
		jobs[i] = pulse.JobRequest{Topic: topic, Args: argsFor(topic), Options: opts}
	}
	return jobs
}

func argsFor(topic string) map[string]any {
	switch topic {
	case "email.send":
		return map[string]any{"to": fmt.Sprintf("user%d@example.com", rand.IntN(1000)), "template": "welcome"}
	case "report.render":
		return map[string]any{"report_id": rand.IntN(100000), "format": "pdf"}
	case "image.resize":
		return map[string]any{"image_id": rand.IntN(100000), "width": 320 * (1 + rand.IntN(4))}
	default:
		return map[string]any{"n": rand.IntN(1000)}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
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
func credentials() []pulse.ClientOption {
	user := os.Getenv("PULSE_USER")
	if user == "" {
		return nil
	}
	opts := []pulse.ClientOption{pulse.WithUserPass(user, os.Getenv("PULSE_PASSWORD"))}
	// Beyond loopback the SDK sends credentials over plaintext only when
	// told to (docker-compose.yml's private network does).
	if os.Getenv("PULSE_ALLOW_PLAINTEXT_CREDENTIALS") == "true" {
		opts = append(opts, pulse.AllowPlaintextCredentials())
	}
	return opts
}
