// Command e2e-worker is the SDK worker the end-to-end chaos tests run as a
// separate OS process, so a test can kill -9 it or SIGSTOP it mid-job. It
// records every handler start and end as one JSON line in a file the test
// reads, and logs (the SDK's lines included) as JSON to stderr.
//
// A handler completes at once, unless -hold names a file: then it blocks
// until that file exists (ignoring its context, as a handler that does not
// check for cancellation would) and completes, or, with -honor-cancel, also
// returns when its context is canceled, failing with the cancellation cause.
// -work makes every handler take that long first.
//
// Usage:
//
//	e2e-worker -gateways host:port[,host:port] -topic T -id W -record FILE
//	           [-concurrency N] [-hold FILE] [-honor-cancel] [-work D]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// holdPoll is how often a held handler looks for its release file.
const holdPoll = 20 * time.Millisecond

// Record is one line of the record file. Event is "start", "canceled" (the
// handler's context was canceled while it ran; Cause says why) or "end"
// (Err is what the handler returned, empty for success).
type Record struct {
	Event   string    `json:"event"`
	Job     string    `json:"job"`
	Attempt int       `json:"attempt"`
	Worker  string    `json:"worker"`
	At      time.Time `json:"at"`
	Cause   string    `json:"cause,omitempty"`
	Err     string    `json:"err,omitempty"`
}

type options struct {
	gateways    []string
	topic       string
	id          string
	record      string
	concurrency int
	hold        string
	honorCancel bool
	work        time.Duration
}

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-worker:", err)
		os.Exit(2)
	}
	logger = logger.With("worker_id", opts.id)
	if err := run(opts, logger); err != nil {
		logger.Error("e2e-worker failed", "error", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	var gateways string
	fs := flag.NewFlagSet("e2e-worker", flag.ContinueOnError)
	fs.StringVar(&gateways, "gateways", "", "comma-separated dispatch-gateway addresses (required)")
	fs.StringVar(&o.topic, "topic", "", "topic to work on (required)")
	fs.StringVar(&o.id, "id", "", "worker id, stored as locked_by (required)")
	fs.StringVar(&o.record, "record", "", "file the handler events are appended to, one JSON line each (required)")
	fs.IntVar(&o.concurrency, "concurrency", 1, "handlers run at once")
	fs.StringVar(&o.hold, "hold", "", "block each handler until this file exists")
	fs.BoolVar(&o.honorCancel, "honor-cancel", false, "with -hold, also return (failing) when the handler's context is canceled")
	fs.DurationVar(&o.work, "work", 0, "time every handler takes before completing")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, g := range strings.Split(gateways, ",") {
		if g = strings.TrimSpace(g); g != "" {
			o.gateways = append(o.gateways, g)
		}
	}
	switch {
	case len(o.gateways) == 0:
		return o, errors.New("-gateways is required")
	case o.topic == "":
		return o, errors.New("-topic is required")
	case o.id == "":
		return o, errors.New("-id is required")
	case o.record == "":
		return o, errors.New("-record is required")
	}
	return o, nil
}

func run(o options, logger *slog.Logger) error {
	rec, err := openRecorder(o.record)
	if err != nil {
		return err
	}
	defer rec.close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := pulse.NewWorker(o.gateways, pulse.WithWorkerID(o.id), pulse.WithConcurrency(o.concurrency),
		pulse.WithLogger(logger), pulse.WithShutdownTimeout(time.Second))
	if err != nil {
		return err
	}
	w.Register(o.topic, func(ctx context.Context, job *pulse.Job) error {
		rec.write(Record{Event: "start", Job: job.ID, Attempt: job.Attempt, Worker: o.id})
		err := handle(ctx, o, job, rec)
		if err == nil {
			// The completion carries which attempt produced it, so a
			// judge can check that a stored result is the completing
			// attempt's, never a stale one's.
			err = job.SetResult(map[string]any{"attempt": job.Attempt, "worker": o.id})
		}
		end := Record{Event: "end", Job: job.ID, Attempt: job.Attempt, Worker: o.id}
		if err != nil {
			end.Err = err.Error()
		}
		rec.write(end)
		return err
	})
	logger.Info("e2e-worker started", "gateways", o.gateways, "topic", o.topic, "concurrency", o.concurrency)
	return w.Run(ctx)
}

func handle(ctx context.Context, o options, job *pulse.Job, rec *recorder) error {
	if o.work > 0 {
		time.Sleep(o.work)
	}
	if o.hold == "" {
		return nil
	}
	tick := time.NewTicker(holdPoll)
	defer tick.Stop()
	done := ctx.Done()
	for {
		if _, err := os.Stat(o.hold); err == nil {
			return nil
		}
		select {
		case <-done:
			cause := context.Cause(ctx)
			rec.write(Record{Event: "canceled", Job: job.ID, Attempt: job.Attempt, Worker: o.id, Cause: cause.Error()})
			if o.honorCancel {
				return fmt.Errorf("stopped: %w", cause)
			}
			done = nil // keep holding, as a handler that ignores its context would
		case <-tick.C:
		}
	}
}

// recorder appends records to the record file, one write per line, so a
// kill -9 can cut at most the last line.
type recorder struct {
	mu sync.Mutex
	f  *os.File
}

func openRecorder(path string) (*recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open record file: %w", err)
	}
	return &recorder{f: f}, nil
}

func (r *recorder) write(rec Record) {
	rec.At = time.Now()
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err) // Record always marshals
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.Write(append(b, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-worker: write record:", err)
	}
}

func (r *recorder) close() { _ = r.f.Close() }
