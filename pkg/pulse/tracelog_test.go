package pulse

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
	"github.com/pulsequeue/pulse/pkg/tracelog"
)

// syncBuffer is a bytes.Buffer safe for the worker's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

// TestLinesAboutAJobCarryItsTraceID: the worker's own lines about a job
// (a panic here) and the handler's lines logged with its ctx through a
// tracelog logger carry the trace id of the job's stored traceparent.
func TestLinesAboutAJobCarryItsTraceID(t *testing.T) {
	t.Parallel()
	const (
		traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	)
	var workerLog, appLog syncBuffer
	app := slog.New(tracelog.NewHandler(slog.NewJSONHandler(&appLog, nil)))
	gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
	registerWorker(t, []string{gw.Addr()}, func(w *Worker) {
		w.Register("t", func(ctx context.Context, job *Job) error {
			app.InfoContext(ctx, "charging the card", "job", job.ID)
			panic("card declined")
		})
	}, WithLogger(slog.New(slog.NewJSONHandler(&workerLog, nil))))
	a := fakegateway.Assignment("job-1", "t")
	a.Traceparent = traceparent
	untraced := fakegateway.Assignment("job-2", "t")
	s := gw.NextStream(t)
	s.Assign(a)
	require.Equal(t, pulsev1.Outcome_OUTCOME_FAIL, gw.NextResult(t).GetOutcome())
	s.Assign(untraced)
	require.Equal(t, pulsev1.Outcome_OUTCOME_FAIL, gw.NextResult(t).GetOutcome())

	byJob := map[string]map[string]any{}
	for _, l := range appLog.lines(t) {
		byJob[l["job"].(string)] = l
	}
	require.Equal(t, traceID, byJob["job-1"][tracelog.TraceID], "the handler's line: %v", byJob["job-1"])
	require.NotEmpty(t, byJob["job-1"][tracelog.SpanID])
	require.NotContains(t, byJob["job-2"], tracelog.TraceID, "a job without a trace: %v", byJob["job-2"])

	panics := map[string]map[string]any{}
	for _, l := range workerLog.lines(t) {
		if l["msg"] == "handler panicked" {
			panics[l[logKeyJobID].(string)] = l
		}
	}
	require.Len(t, panics, 2)
	require.Equal(t, traceID, panics["job-1"][tracelog.TraceID], "the worker's line: %v", panics["job-1"])
	require.NotContains(t, panics["job-2"], tracelog.TraceID)
}

// TestARejectedResultsLineCarriesItsTraceID: the worker's line about a
// result the gateway refused carries the job's trace id.
func TestARejectedResultsLineCarriesItsTraceID(t *testing.T) {
	t.Parallel()
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	var workerLog syncBuffer
	gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
	gw.SetReportFn(func(req *pulsev1.ReportResultRequest) (*pulsev1.ReportResultResponse, error) {
		resp := &pulsev1.ReportResultResponse{}
		for _, r := range req.GetResults() {
			resp.Acks = append(resp.Acks, &pulsev1.ResultAck{JobId: r.GetJobId(), Attempt: r.GetAttempt(),
				Code: int32(codes.FailedPrecondition), Message: "stale attempt"})
		}
		return resp, nil
	})
	registerWorker(t, []string{gw.Addr()}, func(w *Worker) {
		w.Register("t", func(context.Context, *Job) error { return nil })
	}, WithLogger(slog.New(slog.NewJSONHandler(&workerLog, nil))))
	a := fakegateway.Assignment("job-1", "t")
	a.Traceparent = "00-" + traceID + "-b7ad6b7169203331-01"
	gw.NextStream(t).Assign(a)
	gw.NextResult(t)
	var line map[string]any
	require.Eventually(t, func() bool {
		for _, l := range workerLog.lines(t) {
			if l["msg"] == "result rejected" {
				line = l
				return true
			}
		}
		return false
	}, liveness, tick)
	require.Equal(t, traceID, line[tracelog.TraceID], "%v", line)
}
