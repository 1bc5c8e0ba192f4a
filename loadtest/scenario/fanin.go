package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// FanInParams shape the fanin run.
type FanInParams struct {
	// Width is the number of parents of the fan-in, and of children of the
	// fan-out.
	Width int
	// Batch is how many jobs one EnqueueMany call carries (at most
	// control-api's PULSE_MAX_BATCH_JOBS); the fan-in's child goes in a
	// call of its own, naming its parents by id.
	Batch int
}

// FanIn measures dependencies at width (ADR-0047) through the fleet: a
// fan-in (one child waiting for Width parents, submitted by id) and a
// fan-out (Width children of one parent, by id, in batches), each
// run by a worker from the moment it starts: how long until the fan-in's
// child has completed (every parent's settle decrementing it), and until
// every child of the fan-out has (the parent's one settle releasing them).
func FanIn(ctx context.Context, t Target, p FanInParams) (Result, error) {
	if p.Width < 1 || p.Batch < 1 {
		return Result{}, fmt.Errorf("fanin: width %d and batch %d must be positive", p.Width, p.Batch)
	}
	client, err := pulse.NewClient(t.ControlGRPC)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	stamp := time.Now().UnixNano()
	inTopic, outTopic := fmt.Sprintf("load.fanin.%d", stamp), fmt.Sprintf("load.fanout.%d", stamp)

	// The fan-in: Width parents in batches, then the child naming them.
	start := time.Now()
	parents := make([]string, 0, p.Width)
	for len(parents) < p.Width {
		reqs := make([]pulse.JobRequest, min(p.Batch, p.Width-len(parents)))
		for i := range reqs {
			reqs[i] = pulse.JobRequest{Topic: inTopic}
		}
		sub, err := client.EnqueueMany(ctx, reqs)
		if err != nil {
			return Result{}, fmt.Errorf("fanin: submit parents: %w", err)
		}
		for _, s := range sub {
			parents = append(parents, s.ID)
		}
	}
	child, err := client.Enqueue(ctx, inTopic, nil, pulse.DependsOn(parents...))
	if err != nil {
		return Result{}, fmt.Errorf("fanin: submit the child: %w", err)
	}
	submitIn := time.Since(start)

	// The fan-out: the parent, then Width children of it by id, in batches
	// (a call carries at most PULSE_MAX_BATCH_JOBS jobs).
	start = time.Now()
	root, err := client.Enqueue(ctx, outTopic, nil)
	if err != nil {
		return Result{}, fmt.Errorf("fanin: submit the fan-out's parent: %w", err)
	}
	var outs []pulse.Submitted
	for len(outs) < p.Width {
		reqs := make([]pulse.JobRequest, min(p.Batch, p.Width-len(outs)))
		for i := range reqs {
			reqs[i] = pulse.JobRequest{Topic: outTopic, Options: []pulse.EnqueueOption{pulse.DependsOn(root.ID)}}
		}
		sub, err := client.EnqueueMany(ctx, reqs)
		if err != nil {
			return Result{}, fmt.Errorf("fanin: submit the fan-out's children: %w", err)
		}
		outs = append(outs, sub...)
	}
	submitOut := time.Since(start)

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := pulse.NewWorker(t.GatewayAddrs, pulse.WithConcurrency(256), pulse.WithLogger(quiet))
	if err != nil {
		return Result{}, err
	}
	var parentsSeen int
	w.Register(inTopic, func(ctx context.Context, job *pulse.Job) error {
		if job.ID != child.ID {
			return nil
		}
		ps, err := job.ParentResults(ctx)
		if err != nil {
			return err
		}
		parentsSeen = len(ps)
		return job.SetResult(json.RawMessage(`{"ok":true}`))
	})
	w.Register(outTopic, func(context.Context, *pulse.Job) error { return nil })
	workCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	released := time.Now()
	go func() { _ = w.Run(workCtx) }()

	info, err := client.Wait(ctx, child.ID)
	if err != nil {
		return Result{}, fmt.Errorf("fanin: wait for the child: %w", err)
	}
	fanInDone := time.Since(released)
	if info.Status != "COMPLETED" || parentsSeen != p.Width {
		return Result{}, fmt.Errorf("fanin: the child ended %s having read %d of %d parents", info.Status, parentsSeen, p.Width)
	}
	for _, s := range outs {
		info, err := client.Wait(ctx, s.ID)
		if err != nil {
			return Result{}, fmt.Errorf("fanin: wait for a fan-out child: %w", err)
		}
		if info.Status != "COMPLETED" {
			return Result{}, fmt.Errorf("fanin: a fan-out child ended %s", info.Status)
		}
	}
	bothDone := time.Since(released)
	stopWorker()
	return Result{
		Scenario: "fanin",
		Params:   map[string]any{"width": p.Width, "batch": p.Batch},
		Metrics: map[string]float64{
			"fanin_submit_seconds":  submitIn.Seconds(),
			"fanout_submit_seconds": submitOut.Seconds(),
			"fanin_run_seconds":     fanInDone.Seconds(),
			"all_run_seconds":       bothDone.Seconds(),
		},
	}, nil
}
