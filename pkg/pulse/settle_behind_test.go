package pulse

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

// quietWindow is how long a test watches for a credit that must not come.
// Waiting longer cannot make a correct worker fail; a broken one sends its
// credit within milliseconds.
const quietWindow = 300 * time.Millisecond

// ackAll acknowledges every result of req as completed.
func ackAll(req *pulsev1.ReportResultRequest) *pulsev1.ReportResultResponse {
	resp := &pulsev1.ReportResultResponse{}
	for _, r := range req.GetResults() {
		resp.Acks = append(resp.Acks, &pulsev1.ResultAck{JobId: r.GetJobId(), Attempt: r.GetAttempt(), Status: pulsev1.JobStatus_JOB_STATUS_COMPLETED})
	}
	return resp
}

// noCreditFor fails if a credit arrives on fs within quietWindow.
func noCreditFor(t *testing.T, fs *fakegateway.Stream, why string) {
	t.Helper()
	select {
	case n := <-fs.Credits():
		t.Fatalf("%s: got a credit of %d", why, n)
	case <-time.After(quietWindow):
	}
}

// finishedHandler counts the jobs whose handler returned.
func finishedHandler(done chan<- string) Handler {
	return func(_ context.Context, job *Job) error {
		done <- job.ID
		return nil
	}
}

func awaitFinished(t *testing.T, done <-chan string, n int) {
	t.Helper()
	for range n {
		select {
		case <-done:
		case <-time.After(liveness):
			t.Fatal("handler did not run")
		}
	}
}

// startHeldReports runs a worker with 2 slots and the given settle-behind
// against a gateway that acknowledges no report until settle is closed.
// done receives each job whose handler returned.
func startHeldReports(t *testing.T, settleBehind int) (gw *fakegateway.Gateway, fs *fakegateway.Stream, done chan string, settle chan struct{}) {
	t.Helper()
	gw = fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
	settle = make(chan struct{})
	gw.SetReportFn(func(req *pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error) {
		<-settle
		return ackAll(req), nil
	})
	done = make(chan string, 10)
	startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": finishedHandler(done)},
		WithConcurrency(2), WithSettleBehind(settleBehind))
	return gw, gw.NextStream(t), done, settle
}

func TestSettleBehind(t *testing.T) {
	t.Parallel()

	t.Run("SlotsComeBackBeforeTheirResultsSettleUpToTheLimit", func(t *testing.T) {
		t.Parallel()
		gw, fs, done, settle := startHeldReports(t, 3)

		// Two jobs finish while no report settles: both slots come back.
		fs.Assign(fakegateway.Assignment("j1", "t"), fakegateway.Assignment("j2", "t"))
		awaitFinished(t, done, 2)
		fs.AwaitCredits(t, 2)

		// Two more: one slot comes back, taking the last place behind;
		// the other waits for results to settle.
		fs.Assign(fakegateway.Assignment("j3", "t"), fakegateway.Assignment("j4", "t"))
		awaitFinished(t, done, 2)
		fs.AwaitCredits(t, 1)
		noCreditFor(t, fs, "a fourth unsettled result got its slot back past the limit of 3")

		// Reports settle: the held slot comes back, and every result is
		// reported once.
		close(settle)
		fs.AwaitCredits(t, 1)
		got := map[string]bool{}
		for range 4 {
			got[gw.NextResult(t).GetJobId()] = true
		}
		require.Len(t, got, 4)
	})

	t.Run("ZeroMakesEverySlotWaitForItsResult", func(t *testing.T) {
		t.Parallel()
		_, fs, done, settle := startHeldReports(t, 0)

		fs.Assign(fakegateway.Assignment("j1", "t"), fakegateway.Assignment("j2", "t"))
		awaitFinished(t, done, 2)
		noCreditFor(t, fs, "a slot came back before its result settled")
		close(settle)
		fs.AwaitCredits(t, 2)
	})

	t.Run("RejectedResultsGiveTheirPlaceBack", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		gw.SetReportFn(func(req *pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error) {
			resp := &pulsev1.ReportResultResponse{}
			for _, r := range req.GetResults() {
				resp.Acks = append(resp.Acks, &pulsev1.ResultAck{JobId: r.GetJobId(), Attempt: r.GetAttempt(), Code: 9, Message: "lease lost"})
			}
			return resp, nil
		})
		done := make(chan string, 10)
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": finishedHandler(done)},
			WithConcurrency(1), WithSettleBehind(1))
		fs := gw.NextStream(t)

		// One at a time, each after the previous result was rejected: were
		// a rejected result to keep its place, the second slot would wait.
		for i := range 5 {
			fs.Assign(fakegateway.Assignment(fmt.Sprintf("j%d", i), "t"))
			awaitFinished(t, done, 1)
			gw.NextResult(t)
			fs.AwaitCredits(t, 1)
		}
	})

	t.Run("NegativeIsRejected", func(t *testing.T) {
		t.Parallel()
		_, err := NewWorker([]string{"localhost:1"}, WithSettleBehind(-1))
		require.ErrorContains(t, err, "settle-behind must not be negative")
	})
}
