package pulse

import (
	"sync"
	"sync/atomic"
)

// runners runs the executor's jobs on goroutines that take one job after
// another. A goroutine per job starts with a small stack, and a handler
// called through middleware, tracing and recover grows it on every job:
// in a process of producers and no-op handlers, starting and growing
// those goroutines took a tenth of its CPU. A runner keeps its grown stack for
// the next job. There are never more runners than jobs that ran at once;
// idle ones wait until stop.
type runners struct {
	tasks chan func() // unbuffered: a send succeeds only if a runner waits
	quit  chan struct{}
	once  sync.Once
	// spawned counts the runners started, for tests.
	spawned atomic.Int64
}

func newRunners() *runners {
	return &runners{tasks: make(chan func()), quit: make(chan struct{})}
}

// run runs task on an idle runner, or on a new one if none is idle.
func (r *runners) run(task func()) {
	select {
	case r.tasks <- task:
	default:
		r.spawned.Add(1)
		go r.loop(task)
	}
}

func (r *runners) loop(task func()) {
	for {
		task()
		select {
		case task = <-r.tasks:
		case <-r.quit:
			return
		}
	}
}

// stop ends every runner once its task, if any, returns. run must not be
// called after stop.
func (r *runners) stop() { r.once.Do(func() { close(r.quit) }) }
