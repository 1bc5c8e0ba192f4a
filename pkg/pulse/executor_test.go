package pulse

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

func noopExecutor() *executor {
	const concurrency = 1
	handlers := map[string]topicHandler{"t": {handler: func(context.Context, *Job) error { return nil }}}
	return newExecutor(context.Background(), handlers, concurrency, concurrency, nil, nil, nil, slog.New(slog.DiscardHandler))
}

func TestExecuteStopped(t *testing.T) {
	stop := errors.New("stream closed")
	t.Run("BeforeItGotHere", func(t *testing.T) {
		e := noopExecutor()
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(stop)
		_, err := e.execute(ctx, &Job{Topic: "t"}, jobKey{})
		if !errors.Is(err, stop) {
			t.Fatalf("execute with a free slot and a stopped job = %v, want the stop's cause", err)
		}
		if len(e.sem) != 0 {
			t.Fatalf("a stopped job holds a slot")
		}
	})
	t.Run("WhileWaitingForASlot", func(t *testing.T) {
		e := noopExecutor()
		e.sem <- struct{}{} // the only slot is taken
		ctx, cancel := context.WithCancelCause(t.Context())
		done := make(chan error, 1)
		go func() { _, err := e.execute(ctx, &Job{Topic: "t"}, jobKey{}); done <- err }()
		cancel(stop)
		select {
		case err := <-done:
			if !errors.Is(err, stop) {
				t.Fatalf("execute stopped while waiting = %v, want the stop's cause", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a job waiting for a slot did not stop with its context")
		}
	})
	t.Run("RunsWithAFreeSlot", func(t *testing.T) {
		e := noopExecutor()
		ran := false
		e.handlers["t"] = topicHandler{handler: func(context.Context, *Job) error { ran = true; return nil }}
		if _, err := e.execute(t.Context(), &Job{Topic: "t"}, jobKey{}); err != nil || !ran {
			t.Fatalf("execute = %v, ran %v; want the handler run", err, ran)
		}
		if len(e.sem) != 0 {
			t.Fatalf("the slot was not given back")
		}
	})
}

// BenchmarkExecute is one no-op job through execute with a slot free, as
// the worker runs it: with its own cancelable context.
func BenchmarkExecute(b *testing.B) {
	e := noopExecutor()
	job := &Job{Topic: "t"}
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancelCause(context.Background())
		if _, err := e.execute(ctx, job, jobKey{}); err != nil {
			b.Fatal(err)
		}
		cancel(nil)
	}
}
