package pulsetest_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// recordingT stands in for a test that is expected to fail: it records
// what failed it and ends the goroutine as t.Fatalf does. Methods the
// package does not use panic (the embedded nil TB).
type recordingT struct {
	testing.TB
	mu       sync.Mutex
	fatal    string
	cleanups []func()
}

func (r *recordingT) Helper()         {}
func (r *recordingT) Log(args ...any) {}
func (r *recordingT) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}
func (r *recordingT) Errorf(string, ...any) {}
func (r *recordingT) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// failure runs f with a recordingT in its own goroutine and returns what
// failed it ("" if nothing did), after running its cleanups.
func failure(f func(t testing.TB)) string {
	r := &recordingT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return r.fatal
}
