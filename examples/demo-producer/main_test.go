package main

import (
	"encoding/json"
	"testing"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetest"
)

// A batch goes out in one call, every job on a demo topic with the args
// its topic's worker expects and a priority in range.
func TestEnqueueSendsTheBatch(t *testing.T) {
	t.Parallel()
	ctl := pulsetest.NewControl(t)
	topics := []string{"email.send", " report.render", "image.resize "}
	if err := enqueue(t.Context(), ctl.Client(t), batch(50, topics)); err != nil {
		t.Fatal(err)
	}
	jobs := ctl.Enqueued()
	if len(jobs) != 50 {
		t.Fatalf("%d jobs enqueued, want 50", len(jobs))
	}
	keys := map[string][]string{
		"email.send":    {"to", "template"},
		"report.render": {"report_id", "format"},
		"image.resize":  {"image_id", "width"},
	}
	for _, j := range jobs {
		want, ok := keys[j.Topic]
		if !ok {
			t.Fatalf("job %s on topic %q, not a demo topic", j.ID, j.Topic)
		}
		var args map[string]any
		if err := json.Unmarshal(j.Args, &args); err != nil {
			t.Fatalf("job %s: %v", j.ID, err)
		}
		for _, k := range want {
			if _, ok := args[k]; !ok {
				t.Fatalf("job %s of %s has no %q: %s", j.ID, j.Topic, k, j.Args)
			}
		}
		if j.Priority < pulse.MinPriority || j.Priority > pulse.MaxPriority {
			t.Fatalf("job %s: priority %d", j.ID, j.Priority)
		}
	}
	// Every email is the welcome template.
	ctl.RequireEnqueued(t, "email.send", func(args json.RawMessage) bool {
		var a struct{ Template string }
		return json.Unmarshal(args, &a) == nil && a.Template == "welcome"
	})
}
