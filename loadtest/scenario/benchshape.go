package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The river scenario's workloads are the two modes of River's own CLI
// benchmark (`river bench`, River's cmd/river/riverbench), reproduced for
// every side so that River's number in the harness is the number River's
// CLI prints (the rivercli scenario checks it, run beside the CLI):
//
//   - WorkloadConcurrent is `river bench --duration D`: one inserter keeps
//     at least BenchMinJobs jobs ahead of the workers, inserting
//     BenchInsertBatch jobs at a time whenever fewer are left (looking every
//     BenchRefillEvery); the workers start once the first BenchMinJobs are
//     in, and the rate is the jobs completed from the workers' start to D
//     later.
//   - WorkloadBacklog is `river bench --num-total-jobs N`: N jobs are
//     inserted first, BenchInsertBatch at a time by one inserter, then the
//     workers start, and the rate is N over the workers' start to the last
//     completion.
const (
	WorkloadConcurrent = "concurrent"
	WorkloadBacklog    = "backlog"

	BenchInsertBatch = 5000
	BenchMinJobs     = 75000
	BenchRefillEvery = 250 * time.Millisecond
)

// BenchWorkload is one run's shape: the mode and its size.
type BenchWorkload struct {
	Mode     string        // WorkloadConcurrent or WorkloadBacklog
	Duration time.Duration // WorkloadConcurrent: how long the workers run
	Total    int           // WorkloadBacklog: jobs inserted before the workers start
	// Warm (WorkloadConcurrent) is how much of Duration runs before the
	// measured span begins: the rate is the handlers that ran after it,
	// so a cleaner that starts deleting only once jobs are old enough is
	// inside the measurement (the soak's sustained maximum, ADR-0057).
	// 0: the whole Duration, counted from the side's table.
	Warm time.Duration
}

// benchSide is one queue under the River CLI's workloads.
type benchSide interface {
	// insert inserts n ≤ BenchInsertBatch no-op jobs, as one inserter's
	// one call.
	insert(ctx context.Context, n int) error
	// start starts the workers; done is called once per job whose
	// handler (or, for a side with no handler, whose completion) ran.
	// stop stops them and waits.
	start(ctx context.Context, done func()) (stop func(), err error)
	// completed is how many jobs the side's table shows completed.
	completed(ctx context.Context) (int64, error)
}

// benchRun is what one side did in one workload.
type benchRun struct {
	jobs     int64         // jobs completed in the measured span
	elapsed  time.Duration // the measured span: the workers' start to the end
	inserted int64
}

func (r benchRun) rate() float64 { return float64(r.jobs) / r.elapsed.Seconds() }

// runBench runs w against side. before runs once the first jobs are in and
// just before the workers start (the meter's start; for a backlog also
// BacklogReady's settle and checkpoint).
func runBench(ctx context.Context, side benchSide, w BenchWorkload, before func() error) (benchRun, error) {
	var inserted, worked atomic.Int64
	done := func() { worked.Add(1) }
	if w.Mode == WorkloadBacklog {
		for inserted.Load() < int64(w.Total) {
			n := min(BenchInsertBatch, w.Total-int(inserted.Load()))
			if err := side.insert(ctx, n); err != nil {
				return benchRun{}, fmt.Errorf("insert: %w", err)
			}
			inserted.Add(int64(n))
		}
		if before != nil {
			if err := before(); err != nil {
				return benchRun{}, err
			}
		}
		begin := time.Now()
		stop, err := side.start(ctx, done)
		if err != nil {
			return benchRun{}, fmt.Errorf("start: %w", err)
		}
		defer stop()
		if err := waitCompleted(ctx, side, &worked, int64(w.Total)); err != nil {
			return benchRun{}, err
		}
		return benchRun{jobs: int64(w.Total), elapsed: time.Since(begin), inserted: inserted.Load()}, nil
	}

	feedCtx, stopFeed := context.WithCancel(ctx)
	ready := make(chan struct{})
	var feedErr error
	var feedWG sync.WaitGroup
	feedWG.Go(func() {
		feedErr = feed(feedCtx, side, &inserted, &worked, ready)
	})
	stopFeeding := func() error {
		stopFeed()
		feedWG.Wait()
		if errors.Is(feedErr, context.Canceled) {
			return nil
		}
		return feedErr
	}
	defer func() { _ = stopFeeding() }()
	select {
	case <-ready:
	case <-ctx.Done():
		return benchRun{}, ctx.Err()
	}
	if feedErr != nil {
		return benchRun{}, feedErr
	}
	if before != nil {
		if err := before(); err != nil {
			return benchRun{}, err
		}
	}
	begin := time.Now()
	stop, err := side.start(ctx, done)
	if err != nil {
		return benchRun{}, fmt.Errorf("start: %w", err)
	}
	defer stop()
	if w.Warm > 0 {
		return runWarmed(ctx, w, &worked, stopFeeding, &inserted)
	}
	select {
	case <-time.After(w.Duration):
	case <-ctx.Done():
		return benchRun{}, ctx.Err()
	}
	// The count's snapshot is taken when the statement starts: the span
	// ends just before it is sent.
	end := time.Now()
	n, err := side.completed(ctx)
	if err != nil {
		return benchRun{}, err
	}
	if err := stopFeeding(); err != nil {
		return benchRun{}, fmt.Errorf("insert: %w", err)
	}
	return benchRun{jobs: n, elapsed: end.Sub(begin), inserted: inserted.Load()}, nil
}

// runWarmed ends a concurrent run whose workers have just started: it
// counts the handlers that run between w.Warm and w.Duration. The table's
// completed count cannot serve: a cleaner deletes completed rows during a
// run this long.
func runWarmed(ctx context.Context, w BenchWorkload, worked *atomic.Int64, stopFeeding func() error, inserted *atomic.Int64) (benchRun, error) {
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sleep(w.Warm); err != nil {
		return benchRun{}, err
	}
	from, begin := worked.Load(), time.Now()
	if err := sleep(w.Duration - w.Warm); err != nil {
		return benchRun{}, err
	}
	n, end := worked.Load()-from, time.Now()
	if err := stopFeeding(); err != nil {
		return benchRun{}, fmt.Errorf("insert: %w", err)
	}
	return benchRun{jobs: n, elapsed: end.Sub(begin), inserted: inserted.Load()}, nil
}

// feed is the River CLI's continuous inserter: every BenchRefillEvery it
// inserts batches until at least BenchMinJobs jobs are left to work, and it
// closes ready after its first round.
func feed(ctx context.Context, side benchSide, inserted, worked *atomic.Int64, ready chan struct{}) error {
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(BenchRefillEvery):
			}
		}
		for inserted.Load()-worked.Load() < BenchMinJobs {
			if err := side.insert(ctx, BenchInsertBatch); err != nil {
				if first {
					close(ready)
				}
				if ctx.Err() != nil {
					return ctx.Err() // stopped mid-insert: not a failure
				}
				return err
			}
			inserted.Add(BenchInsertBatch)
		}
		if first {
			close(ready)
		}
	}
}

// waitCompleted returns once the handlers have seen that many jobs (free to
// check) and the side's table shows them completed (a scan, so rarely).
func waitCompleted(ctx context.Context, side benchSide, worked *atomic.Int64, jobs int64) error {
	for worked.Load() < jobs && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	for {
		n, err := side.completed(ctx)
		if err != nil {
			return err
		}
		if n >= jobs {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("only %d of %d jobs completed: %w", n, jobs, ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
