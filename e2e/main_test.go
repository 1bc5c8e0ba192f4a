package e2e_test

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// upFleet starts a fresh fleet for one test and stops it when the test ends,
// printing every process's log tail if the test failed.
func upFleet(t *testing.T, opts localfleet.Options) *localfleet.Fleet {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	// A test that brings no credentials of its own runs the fleet open
	// (PULSE_AUTH=none); one that sets PULSE_AUTH_* in Env gets exactly that.
	opts.Open = true
	if opts.PostgresSettings == nil {
		// Pause exactness is judged by commit time (claimwitness).
		opts.PostgresSettings = map[string]string{"track_commit_timestamp": "on"}
	}
	// Up builds what it lacks, starts Postgres and waits for each service:
	// several waits, each bounded by the shared patience.
	ctx, cancel := context.WithTimeout(context.Background(), 5*proctest.Patience)
	defer cancel()
	f, err := localfleet.Up(ctx, opts)
	if err != nil {
		t.Fatalf("fleet up: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range f.Processes {
				t.Logf("--- %s log tail ---\n%s", p.Name, p.Logs())
			}
		}
		if err := f.Down(); err != nil {
			t.Errorf("fleet down: %v", err)
		}
	})
	return f
}
