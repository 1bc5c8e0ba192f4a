package main

import (
	"testing"

	"github.com/pulsequeue/pulse/pkg/pulsetest"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// Each attempt of the demo handler, run by a real worker, ends in one of
// its three outcomes and counts exactly that one.
func TestHandlerCountsWhatItReports(t *testing.T) {
	t.Parallel()
	var c counts
	for i := range 10 {
		before := [3]int64{c.done.Load(), c.failed.Load(), c.permanent.Load()}
		res := pulsetest.Work(t.Context(), t, handler(&c), map[string]int{"n": i}, pulsetest.WithTopic("email.send"))
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
