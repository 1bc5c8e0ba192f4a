package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetest"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/tracelog"
)

// Each attempt of the demo handler, run by a real worker, ends in one of
// its three outcomes and counts exactly that one.
func TestHandlerCountsWhatItReports(t *testing.T) {
	t.Parallel()
	var c counts
	for i := range 10 {
		before := [3]int64{c.done.Load(), c.failed.Load(), c.permanent.Load()}
		res := pulsetest.Work(t.Context(), t, handler(&c, slog.New(slog.DiscardHandler)), map[string]int{"n": i}, pulsetest.WithTopic("email.send"))
		after := [3]int64{c.done.Load(), c.failed.Load(), c.permanent.Load()}
		want := before
		switch res.Outcome {
		case pulsetype.OutcomeComplete:
			want[0]++
		case pulsetype.OutcomeFail:
			want[1]++
			if res.Error != "demo: downstream timed out" {
				t.Fatalf("failed with %q", res.Error)
			}
		case pulsetype.OutcomeFailPermanent:
			want[2]++
			if res.Error != "demo: input rejected" {
				t.Fatalf("dead-lettered with %q", res.Error)
			}
		default:
			t.Fatalf("no outcome: %+v", res)
		}
		if after != want {
			t.Fatalf("attempt %d reported %v: counts went %v → %v, want %v", i, res.Outcome, before, after, want)
		}
	}
}

// A job asking for fail_attempts fails exactly those attempts, then
// completes, and each line the handler logs about it carries the job's
// trace id.
func TestFailAttemptsFailsThoseThenCompletes(t *testing.T) {
	t.Parallel()
	const (
		traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	)
	var c counts
	var buf bytes.Buffer
	logger := slog.New(tracelog.NewHandler(slog.NewJSONHandler(&buf, nil)))
	for attempt := 1; attempt <= 4; attempt++ {
		res := pulsetest.Work(t.Context(), t, handler(&c, logger), map[string]int{"fail_attempts": 2},
			pulsetest.WithTopic("email.send"), pulsetest.WithAttempt(attempt), pulsetest.WithMiddleware(inTrace(t, traceparent)))
		want := pulsetype.OutcomeComplete
		if attempt <= 2 {
			want = pulsetype.OutcomeFail
		}
		if res.Outcome != want {
			t.Fatalf("attempt %d: %v (%q), want %v", attempt, res.Outcome, res.Error, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a line per attempt, got %q", lines)
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if rec[tracelog.TraceID] != traceID {
			t.Fatalf("line without the job's trace id: %s", l)
		}
	}
}

// inTrace runs the handler in the trace of traceparent, as a job carrying
// it runs in a fleet.
func inTrace(t *testing.T, traceparent string) pulse.Middleware {
	t.Helper()
	return func(next pulse.Handler) pulse.Handler {
		return func(ctx context.Context, job *pulse.Job) error {
			ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
			return next(ctx, job)
		}
	}
}
