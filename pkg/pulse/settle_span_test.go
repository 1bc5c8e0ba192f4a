package pulse

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// TestBatchedResultsEachGetASettleInTheirTrace: results reported together
// in one call each get a settle span in their own job's trace, a child of
// their process span, linked to the call's span, failed when the call
// failed; a lone result gets none (the call's span is its settle).
func TestBatchedResultsEachGetASettleInTheirTrace(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
	withTracer := func(batch []pendingResult, call trace.Span, err error) {
		recordBatchedSettlesWith(tracer, batch, call, time.Now(), err)
	}

	var batch []pendingResult
	process := map[trace.TraceID]trace.SpanID{}
	for _, id := range []string{"job-1", "job-2", "job-3"} {
		_, p := tracer.Start(context.Background(), "process t")
		p.End()
		process[p.SpanContext().TraceID()] = p.SpanContext().SpanID()
		batch = append(batch, pendingResult{result: &pulsev1.JobResult{JobId: id, Attempt: 2}, span: p.SpanContext()})
	}
	batch = append(batch, pendingResult{result: &pulsev1.JobResult{JobId: "untraced", Attempt: 1}})
	_, call := tracer.Start(context.Background(), "settle")
	call.End()

	withTracer(batch, call, errors.New("unavailable"))
	settles := map[trace.TraceID]sdktrace.ReadOnlySpan{}
	for _, sp := range spans.Ended() {
		if sp.Name() == "settle" && sp.Parent().IsValid() {
			settles[sp.SpanContext().TraceID()] = sp
		}
	}
	require.Len(t, settles, 3, "one per traced result, none for the untraced one")
	for traceID, processSpan := range process {
		st := settles[traceID]
		require.NotNil(t, st, "trace %s has no settle span", traceID)
		require.Equal(t, processSpan, st.Parent().SpanID(), "the settle span is the child of the job's process span")
		require.Equal(t, trace.SpanKindClient, st.SpanKind())
		require.Len(t, st.Links(), 1)
		require.Equal(t, call.SpanContext().SpanID(), st.Links()[0].SpanContext.SpanID())
		require.Equal(t, "Error", st.Status().Code.String(), "the call failed")
	}

	before := len(spans.Ended())
	withTracer(batch[:1], call, nil)
	require.Len(t, spans.Ended(), before, "a lone result's call span is its settle already")
}
