package pulse

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

// TestAStoppingWorkerHalfClosesAndRunsWhatWasAlreadyClaimed: when Run's
// context ends, the worker half-closes its stream instead of tearing it
// down, so a job the gateway claimed for it in that instant still arrives,
// runs in the wind-down and is reported: no lease is left to lapse.
func TestAStoppingWorkerHalfClosesAndRunsWhatWasAlreadyClaimed(t *testing.T) {
	t.Parallel()
	gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
	gw.HoldHalfClosed()
	ran := make(chan string, 1)
	w := startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": func(_ context.Context, job *Job) error {
		ran <- job.ID
		return nil
	}})
	fs := gw.NextStream(t)

	w.cancel()
	select {
	case <-fs.Gone(): // the worker half-closed; the stream is still open
	case <-time.After(liveness):
		t.Fatal("the stopping worker never half-closed its stream")
	}
	fs.Assign(fakegateway.Assignment("claimed-in-the-last-instant", "t"))
	fs.End()

	select {
	case id := <-ran:
		require.Equal(t, "claimed-in-the-last-instant", id)
	case <-time.After(liveness):
		t.Fatal("the job sent after the half-close never ran")
	}
	require.NoError(t, w.stop(t))
	r := gw.NextResult(t)
	require.Equal(t, "claimed-in-the-last-instant", r.GetJobId())
	require.Equal(t, pulsev1.Outcome_OUTCOME_COMPLETE, r.GetOutcome())
}
